package output_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/output"
)

// storeVerifier checks returned files against the real store, the way the
// deployed one does: missing or damaged is ErrDamaged, anything else is
// "could not tell".
type storeVerifier struct{ store stage.Store }

func (v storeVerifier) VerifyFile(ctx context.Context, f events.OutputFile) error {
	err := stage.Verify(ctx, v.store, events.DataRef{Name: f.Path, Digest: f.Digest, Kind: stage.KindFile, Bytes: f.Bytes})
	if errors.Is(err, stage.ErrNotFound) || errors.Is(err, stage.ErrCorrupt) {
		return fmt.Errorf("%w: %v", output.ErrDamaged, err)
	}
	return err
}

// flakyVerifier cannot reach the store while down is set.
type flakyVerifier struct {
	output.Verifier
	down atomic.Bool
}

var errUnreachable = errors.New("store unreachable")

func (v *flakyVerifier) VerifyFile(ctx context.Context, f events.OutputFile) error {
	if v.down.Load() {
		return errUnreachable
	}
	return v.Verifier.VerifyFile(ctx, f)
}

type fixture struct {
	ctx   context.Context
	js    jetstream.JetStream
	pub   *bus.Publisher
	store stage.Store
}

func start(t *testing.T) *fixture {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 15*time.Second)
	obs, err := js.ObjectStore(ctx, events.DataBucket)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/test", nil), store: stage.NewObjectStore(obs)}
}

func (f *fixture) service(t *testing.T, v output.Verifier) *output.Service {
	t.Helper()
	svc, err := output.New(f.js, output.Config{Verifier: v, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// upload stores content as RUN's collection would and returns the file.
func (f *fixture) upload(t *testing.T, path, content string) events.OutputFile {
	t.Helper()
	local := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(local, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ref, err := stage.Upload(f.ctx, f.store, local, nil)
	if err != nil {
		t.Fatal(err)
	}
	return events.OutputFile{Path: path, Bytes: ref.Bytes, Digest: ref.Digest}
}

// stop logs attempt 1 of a job as held, started and stopped with outcome,
// having collected files, and returns the RunStopped.
func (f *fixture) stop(t *testing.T, job string, outcome events.Outcome, files ...events.OutputFile) events.Envelope {
	t.Helper()
	h := events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 1 << 30}
	decl := []events.OutputDecl{{Path: "result.csv", Required: true}}
	var bytes int64
	for _, file := range files {
		bytes += file.Bytes
	}
	var last events.Envelope
	for _, ev := range []events.Event{
		&events.ComputeHeld{Hold: h, Submitter: "alice"},
		&events.RunStarted{Hold: h},
		&events.RunStopped{Hold: h, Outcome: outcome, Output: events.Collected{Files: files, Missing: []string{}, Bytes: bytes, Declared: decl}},
	} {
		env, err := f.pub.Append(f.ctx, job, ev)
		if err != nil {
			t.Fatal(err)
		}
		last = env
	}
	return last
}

// returned is every OutputReturned in the job's log.
func (f *fixture) returned(t *testing.T, job string) []*events.OutputReturned {
	t.Helper()
	evs, err := bus.ReadJob(f.ctx, f.js, job, 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []*events.OutputReturned
	for _, e := range evs {
		if r, ok := e.Event.(*events.OutputReturned); ok {
			out = append(out, r)
		}
	}
	return out
}

func TestHandleReturnsOnceWhenAStopIsDeliveredTwice(t *testing.T) {
	t.Parallel()
	f := start(t)
	svc := f.service(t, storeVerifier{f.store})
	file := f.upload(t, "result.csv", "a,b\n1,2\n")
	trigger := f.stop(t, "job-1", events.Succeeded, file)

	for range 2 {
		if err := svc.Handle(f.ctx, trigger); err != nil {
			t.Fatal(err)
		}
	}

	ret := f.returned(t, "job-1")
	if len(ret) != 1 {
		t.Fatalf("output returned %d times, want once", len(ret))
	}
	if r := ret[0]; r.Outcome != events.Succeeded || r.Attempt != 1 || !slices.Equal(r.Files, []events.OutputFile{file}) || r.Bytes != file.Bytes || r.Partial {
		t.Errorf("OutputReturned = %+v, want attempt 1 succeeded with %+v", r, file)
	}
}

func TestHandleDoesNotReturnAFileMissingFromTheStore(t *testing.T) {
	t.Parallel()
	f := start(t)
	svc := f.service(t, storeVerifier{f.store})
	good := f.upload(t, "result.csv", "a,b\n")
	lost := events.OutputFile{Path: "extra.bin", Bytes: 4, Digest: "sha256:" + strings.Repeat("0", 64)}

	if err := svc.Handle(f.ctx, f.stop(t, "job-1", events.Succeeded, good, lost)); err != nil {
		t.Fatal(err)
	}

	ret := f.returned(t, "job-1")
	if len(ret) != 1 {
		t.Fatalf("output returned %d times, want once", len(ret))
	}
	r := ret[0]
	if r.Outcome != events.Failed || !strings.Contains(r.Reason, "extra.bin") {
		t.Errorf("outcome %s (%q), want failed naming extra.bin", r.Outcome, r.Reason)
	}
	if !slices.Equal(r.Files, []events.OutputFile{good}) || !slices.Contains(r.Missing, "extra.bin") {
		t.Errorf("returned %+v, missing %q; want only result.csv, extra.bin missing", r.Files, r.Missing)
	}
}

// TestHandleRecordsNothingWhenItCannotTell: a store that does not answer is
// not damage. The handler fails (to be retried), and the retry returns the
// output.
func TestHandleRecordsNothingWhenItCannotTell(t *testing.T) {
	t.Parallel()
	f := start(t)
	v := &flakyVerifier{Verifier: storeVerifier{f.store}}
	v.down.Store(true)
	svc := f.service(t, v)
	trigger := f.stop(t, "job-1", events.Succeeded, f.upload(t, "result.csv", "x\n"))

	err := svc.Handle(f.ctx, trigger)
	if !errors.Is(err, errUnreachable) || bus.IsPermanent(err) {
		t.Fatalf("Handle with the store down: err = %v, want a retryable error", err)
	}
	if ret := f.returned(t, "job-1"); len(ret) != 0 {
		t.Fatalf("returned %+v while the store was down, want nothing", ret)
	}

	v.down.Store(false)
	if err := svc.Handle(f.ctx, trigger); err != nil {
		t.Fatal(err)
	}
	if ret := f.returned(t, "job-1"); len(ret) != 1 || ret[0].Outcome != events.Succeeded {
		t.Errorf("after the retry, returned %+v, want one success", ret)
	}
}

// TestHandleReturnsNothingWithoutAskingTheStore: a stop that collected
// nothing is returned as an empty output at once, without finding whose
// store it would be in: here no submitter can be found (the job has no
// request and no JobSubmitted), and a store asked for would fail.
func TestHandleReturnsNothingWithoutAskingTheStore(t *testing.T) {
	t.Parallel()
	f := start(t)
	svc, err := output.New(f.js, output.Config{Stores: stage.NewTenants(f.js, false), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Handle(f.ctx, f.stop(t, "quiet", events.Succeeded)); err != nil {
		t.Fatal(err)
	}
	ret := f.returned(t, "quiet")
	if len(ret) != 1 || ret[0].Outcome != events.Succeeded || ret[0].Files == nil || len(ret[0].Files) != 0 || ret[0].Manifest != "" {
		t.Fatalf("returned %+v, want one empty output", ret)
	}
	// A stop that lists a file still needs its submitter's store.
	file := events.OutputFile{Path: "result.csv", Bytes: 1, Digest: "sha256:" + strings.Repeat("0", 64)}
	if err := svc.Handle(f.ctx, f.stop(t, "loud", events.Succeeded, file)); err == nil {
		t.Fatal("a stop with a file of no known submitter was returned")
	}
}

// countingVerifier counts the files it is asked to verify.
type countingVerifier struct {
	output.Verifier
	asked atomic.Int64
}

func (v *countingVerifier) VerifyFile(ctx context.Context, f events.OutputFile) error {
	v.asked.Add(1)
	return v.Verifier.VerifyFile(ctx, f)
}

// TestHandleOfHistoryLooksForTheReturnFirst: an OUTPUT that starts over a
// long log sees every stop in it again. A stop from the log's history that
// was returned is left as it is, without verifying its files again; one
// that was not returned, or whose job's last return is another attempt's,
// is returned, once.
func TestHandleOfHistoryLooksForTheReturnFirst(t *testing.T) {
	t.Parallel()
	f := start(t)
	file := f.upload(t, "result.csv", "a,b\n1,2\n")
	done := f.stop(t, "done", events.Succeeded, file)
	if err := f.service(t, storeVerifier{f.store}).Handle(f.ctx, done); err != nil {
		t.Fatal(err)
	}
	notYet := f.stop(t, "not-yet", events.Succeeded, file)
	// A job whose last return is of an earlier attempt than this stop's.
	other := f.stop(t, "other", events.Succeeded, file)
	if err := f.service(t, storeVerifier{f.store}).Handle(f.ctx, other); err != nil {
		t.Fatal(err)
	}
	h := events.Hold{Attempt: 2, Node: "n1", CPU: 1, MemoryBytes: 1 << 30}
	if _, err := f.pub.Append(f.ctx, "other", &events.ComputeHeld{Hold: h, Submitter: "alice"}); err != nil {
		t.Fatal(err)
	}
	second, err := f.pub.Append(f.ctx, "other", &events.RunStopped{Hold: h, Outcome: events.Succeeded,
		Output: events.Collected{Files: []events.OutputFile{file}, Missing: []string{}, Bytes: file.Bytes}})
	if err != nil {
		t.Fatal(err)
	}

	// An hour later, OUTPUT starts again and reads the log's history.
	v := &countingVerifier{Verifier: storeVerifier{f.store}}
	later, err := output.New(f.js, output.Config{Verifier: v, Logger: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := later.Handle(f.ctx, done); err != nil {
		t.Fatal(err)
	}
	if n := v.asked.Load(); n != 0 {
		t.Errorf("a stop returned already: %d file(s) verified again, want none", n)
	}
	if ret := f.returned(t, "done"); len(ret) != 1 {
		t.Errorf("a stop returned already: returned %d times, want once", len(ret))
	}

	for _, stop := range []events.Envelope{notYet, second} {
		before := v.asked.Load()
		if err := later.Handle(f.ctx, stop); err != nil {
			t.Fatal(err)
		}
		if v.asked.Load() == before {
			t.Errorf("%s: the stop's files were not verified", stop)
		}
	}
	if ret := f.returned(t, "not-yet"); len(ret) != 1 || ret[0].Outcome != events.Succeeded {
		t.Errorf("a stop from history not returned yet: returned %+v, want one success", ret)
	}
	if ret := f.returned(t, "other"); len(ret) != 2 || ret[1].Attempt != 2 {
		t.Errorf("a second attempt after a first one's return: returned %+v, want attempts 1 and 2", ret)
	}
}

// TestAStopFromAnotherNodeIsSetAside: a node publishes, under its own name,
// a stop of an attempt held on another node, naming output of its own.
// OUTPUT returns nothing for it, and returns the holder's stop as ever.
func TestAStopFromAnotherNodeIsSetAside(t *testing.T) {
	t.Parallel()
	f := start(t)
	svc := f.service(t, storeVerifier{f.store})
	file := f.upload(t, "result.csv", "a,b\n1,2\n")
	forged := f.upload(t, "result.csv", "forged\n")
	h := events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 1 << 30}
	for _, ev := range []events.Event{&events.ComputeHeld{Hold: h, Submitter: "alice"}, &events.RunStarted{Hold: h}} {
		if _, err := f.pub.Append(f.ctx, "job-1", ev); err != nil {
			t.Fatal(err)
		}
	}
	// The same hold but for the node: the stop decodes only on the
	// subject of the node its body names, which only that node may use.
	other := h
	other.Node = "mallory"
	for _, attempt := range []int{1, 2} {
		other.Attempt = attempt
		env, err := f.pub.Append(f.ctx, "job-1", &events.RunStopped{Hold: other, Outcome: events.NodeLost,
			Output: events.Collected{Files: []events.OutputFile{forged}, Missing: []string{}, Bytes: forged.Bytes}})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Handle(f.ctx, env); err != nil {
			t.Fatal(err)
		}
		if ret := f.returned(t, "job-1"); len(ret) != 0 {
			t.Fatalf("a stop from mallory of attempt %d returned %+v", attempt, ret)
		}
	}
	honest, err := f.pub.Append(f.ctx, "job-1", &events.RunStopped{Hold: h, Outcome: events.Succeeded,
		Output: events.Collected{Files: []events.OutputFile{file}, Missing: []string{}, Bytes: file.Bytes}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Handle(f.ctx, honest); err != nil {
		t.Fatal(err)
	}
	if ret := f.returned(t, "job-1"); len(ret) != 1 || ret[0].Outcome != events.Succeeded || ret[0].Node != "n1" || !slices.Equal(ret[0].Files, []events.OutputFile{file}) {
		t.Errorf("returned %+v, want n1's stop with its file", ret)
	}
}
