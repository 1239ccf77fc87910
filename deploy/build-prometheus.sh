#!/usr/bin/env bash
# Build Prometheus and promtool offline from the Go module proxy, once per
# version: a static binary each (CGO_ENABLED=0, for a FROM scratch image),
# kept in a cache beside Go's build cache so that a machine with a warm
# cache never builds them again (a cold build is ~8 minutes on 2 cores).
#
#   deploy/build-prometheus.sh        prints the directory holding both
#
# E31_PROMETHEUS_VERSION (default below) picks the module version;
# E31_PROMETHEUS_CACHE (default $(go env GOCACHE)/../e31-prometheus) the
# cache. The binaries are written under a temporary name and moved in
# place, so a build that is interrupted leaves nothing half-made behind.
set -euo pipefail

version="${E31_PROMETHEUS_VERSION:-v0.316.0}"
cache="${E31_PROMETHEUS_CACHE:-$(go env GOCACHE)/../e31-prometheus}"
dir="$cache/$version"

mkdir -p "$cache"
# One build at a time: the tests and deploy/build-images.sh may ask at once,
# and two cold builds side by side on 2 cores take twice as long; the one
# that waits finds the binaries made.
exec 9>"$cache/.lock"
flock 9
if [ ! -x "$dir/prometheus" ] || [ ! -x "$dir/promtool" ]; then
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	# Outside any module or workspace: the module's own go.mod decides
	# its dependencies' versions, as its release does.
	(cd "$tmp" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$tmp/bin" \
		go install -trimpath -ldflags='-s -w' \
		"github.com/prometheus/prometheus/cmd/prometheus@$version" \
		"github.com/prometheus/prometheus/cmd/promtool@$version") >&2
	mkdir -p "$dir"
	mv "$tmp/bin/prometheus" "$tmp/bin/promtool" "$dir/"
fi
cd "$dir" && pwd -P
