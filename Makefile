# e31: a batch compute network.  `make demo` and `make test` are all a newcomer needs.

GO        ?= go
BIN       := bin/e31
MODULES   := pkg services/submit services/rent services/run services/output services/release services/ledger stack bench cmd/e31
BENCH_N   ?= 2000
TEST_FLAGS ?= -count=1 -timeout 15m
# The race detector runs on every module's unit and integration tests; the
# long end-to-end load tests run without it to stay inside CI's time.
RACE      ?= -race

export GOFLAGS := -buildvcs=false

.PHONY: all build demo test prereqs-demo prereqs-test unit e2e bench images fuzz fuzz-short lint clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/e31

## demo: check (as root, install) what it needs, build, start e31 dev, run the examples,
## print outcomes and hold records, stop.
demo: prereqs-demo build
	E31=$(BIN) ./scripts/demo.sh

## test: check (as root, install) what it needs, then lint, unit and integration tests of
## every module, a short run of every fuzzer, then end-to-end tests in containers.
test: prereqs-test lint unit fuzz-short e2e

# What each needs beyond Go (and Docker for test), in one script that .ci/run calls too.
prereqs-demo:
	@./scripts/prereqs.sh demo
prereqs-test:
	@./scripts/prereqs.sh test

unit:
	@set -e; for m in $(MODULES); do echo "== go test ./$$m/..."; $(GO) test $(RACE) $(TEST_FLAGS) ./$$m/...; done

# e2e/upstream, e2e/hostile and e2e/compromised are modules of their own,
# outside the workspace: a system that knows e31 only by its published
# schemas, a hostile tenant that knows it only as a submitter does, and a
# compromised run node that knows it only as a node does; none could
# import it.
OUTSIDE_MODULES := e2e/upstream e2e/hostile e2e/compromised
# A cold machine builds Prometheus from its module first (~8 minutes on 2
# cores, once per version): the end-to-end tests get the time for it.
E2E_TIMEOUT ?= 30m
e2e:
	$(GO) test $(TEST_FLAGS) -timeout $(E2E_TIMEOUT) ./e2e/...
	@set -e; for m in $(OUTSIDE_MODULES); do echo "== go test ./$$m/..."; (cd $$m && GOWORK=off $(GO) test $(TEST_FLAGS) ./...); done

## bench: N trivial jobs through the whole life in e31 dev (BENCH_N, default 2000), then
## staging, the scheduler, the ledger, and what a second SUBMIT instance adds under load.
bench: build
	BENCH_N=$(BENCH_N) $(BIN) bench
	$(BIN) bench stage
	$(BIN) bench scheduler
	$(BIN) bench ledger
	$(GO) test -run '^$$' -bench AddingAnInstance -benchtime 1x ./e2e/

images:
	./deploy/build-images.sh

## fuzz: run every fuzzer for a while (FUZZTIME, default a million inputs
## each): the job file parser, the event decoder and the folder manifest
## decoder, which all read what anyone allowed on the bus may write.
# The budget is a count of inputs, not a duration: Go 1.26's fuzzing
# coordinator can report its own -fuzztime deadline as a failure ("context
# deadline exceeded", no input written; go.dev/issue/75804, fixed in 1.27),
# and a count never sets that deadline.
FUZZTIME ?= 1000000x
FUZZERS := ./pkg/jobfile/:FuzzParse ./pkg/events/:FuzzDecode ./pkg/events/:FuzzParseSubject ./pkg/events/:FuzzShapeAgreesWithStream ./pkg/stage/:FuzzDecodeManifest
fuzz:
	@set -e; for f in $(FUZZERS); do echo "== fuzz $$f for $(FUZZTIME)"; $(GO) test $${f%%:*} -run '^$$' -fuzz "^$${f##*:}$$" -fuzztime $(FUZZTIME); done

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=100000x

# golangci-lint is pinned in tools/go.mod (a module of its own, outside the
# workspace, so its dependencies never move e31's) and built once into bin/.
GOLANGCI := bin/golangci-lint
$(GOLANGCI): tools/go.mod tools/go.sum
	GOWORK=off $(GO) build -C tools -o $(CURDIR)/$(GOLANGCI) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

## lint: gofmt, then golangci-lint (go vet, staticcheck, unused, ineffassign, misspell, errcheck) on every module.
lint: $(GOLANGCI)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GOLANGCI) run $(addprefix ./,$(addsuffix /...,$(MODULES) e2e))
	@set -e; for m in $(OUTSIDE_MODULES); do echo "== golangci-lint $$m"; (cd $$m && GOWORK=off $(CURDIR)/$(GOLANGCI) run --config $(CURDIR)/.golangci.yml ./...); done

clean:
	rm -rf bin
