package run_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/run/executor"
)

var quiet = slog.New(slog.DiscardHandler)

// node is one test's server and a RUN agent for node n1, with the plain
// process executor and the real store.
type node struct {
	ctx   context.Context
	js    jetstream.JetStream
	pub   *bus.Publisher
	store stage.Store
	run   *run.Service
	dir   string // for the test's own files
}

func startNode(t *testing.T, wrap func(stage.Store) stage.Store) *node {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 15*time.Second)
	obs, err := js.ObjectStore(ctx, events.DataBucket)
	if err != nil {
		t.Fatal(err)
	}
	store := stage.NewObjectStore(obs)
	exec, err := executor.NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodeStore := store
	if wrap != nil {
		nodeStore = wrap(store)
	}
	svc, err := run.New(js, run.Config{Node: "n1", CPU: 2, MemoryBytes: 1 << 30, DiskBytes: 1 << 30,
		Executor: exec, Store: nodeStore, Grace: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return &node{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/test", nil), store: store, run: svc, dir: t.TempDir()}
}

// job is a shell script run with the given environment, declaring outputs.
func job(script string, env map[string]string, outputs ...events.OutputDecl) events.JobSpec {
	return events.JobSpec{
		Work:    events.Work{Command: []string{"/bin/sh", "-c", script}, Env: env},
		Request: events.Request{CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 1 << 20, LimitSeconds: 60},
		Output:  outputs,
	}
}

// hold logs the job as submitted and held on n1 for attempt 1, and returns
// the hold as RUN's consumer would deliver it.
func (n *node) hold(t *testing.T, id string, spec events.JobSpec) events.Envelope {
	t.Helper()
	n.append(t, id, &events.JobSubmitted{Submitter: "alice", Spec: spec})
	r := spec.Request
	return n.append(t, id, &events.ComputeHeld{
		Hold:      events.Hold{Attempt: 1, Node: "n1", CPU: r.CPU, MemoryBytes: r.MemoryBytes, DiskBytes: r.DiskBytes},
		Submitter: "alice", Spec: spec,
	})
}

func (n *node) append(t *testing.T, id string, ev events.Event) events.Envelope {
	t.Helper()
	env, err := n.pub.Append(n.ctx, id, ev)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func (n *node) handleHeld(t *testing.T, env events.Envelope) {
	t.Helper()
	if err := n.run.HandleHeld(n.ctx, env); err != nil {
		t.Fatalf("HandleHeld(%s): %v", env, err)
	}
}

// handleHeldAsync runs HandleHeld in the background, for a test that acts
// on the job while it runs; wait for its end with returned.
func (n *node) handleHeldAsync(env events.Envelope) <-chan error {
	done := make(chan error, 1)
	go func() { done <- n.run.HandleHeld(n.ctx, env) }()
	return done
}

// returned waits for a HandleHeld started with handleHeldAsync to return
// without an error, and fails the test at the test's deadline.
func (n *node) returned(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-n.ctx.Done():
		t.Fatalf("HandleHeld did not return %s", what)
	}
}

// log returns the names of the job's events and its RunStopped, if any.
func (n *node) log(t *testing.T, id string) ([]string, *events.RunStopped) {
	t.Helper()
	evs, err := bus.ReadJob(n.ctx, n.js, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var stopped *events.RunStopped
	for _, e := range evs {
		names = append(names, events.Name(e.Type))
		if s, ok := e.Event.(*events.RunStopped); ok {
			stopped = s
		}
	}
	return names, stopped
}

// runs counts the lines a job appended to a file outside its workspace:
// how often it really ran.
func runs(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func TestHandleHeldRunsOnceWhenTheHoldIsDeliveredTwice(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	marker := filepath.Join(n.dir, "runs")
	held := n.hold(t, "job-1", job(`echo ran >> "$MARKER"; printf hi > "$E31_OUTPUT/greeting.txt"`,
		map[string]string{"MARKER": marker}, events.OutputDecl{Path: "greeting.txt", Required: true}))

	n.handleHeld(t, held)
	n.handleHeld(t, held)

	names, stopped := n.log(t, "job-1")
	want := []string{"JobSubmitted", "ComputeHeld", "RunStarted", "RunStopped"}
	if !slices.Equal(names, want) {
		t.Fatalf("job-1's log = %v, want %v", names, want)
	}
	if got := runs(t, marker); got != 1 {
		t.Errorf("the job ran %d times, want once", got)
	}
	if stopped.Outcome != events.Succeeded || stopped.ExitCode == nil || *stopped.ExitCode != 0 || stopped.Attempt != 1 || stopped.Node != "n1" {
		t.Errorf("RunStopped = %+v, want attempt 1 on n1 succeeded with exit code 0", stopped)
	}
	if len(stopped.Output.Files) != 1 || stopped.Output.Files[0].Path != "greeting.txt" || stopped.Output.Files[0].Bytes != 2 || len(stopped.Output.Missing) != 0 {
		t.Fatalf("collected output = %+v, want greeting.txt of 2 bytes", stopped.Output)
	}
	// What RUN collected is in the store, intact, for OUTPUT to return.
	dest := filepath.Join(n.dir, "fetched")
	if err := stage.Fetch(n.ctx, n.store, stopped.Output.Files, dest, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "greeting.txt")); string(b) != "hi" {
		t.Errorf("returned greeting.txt = %q, want %q", b, "hi")
	}
}

func TestHandleHeldAfterACancelStopsWithoutStarting(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	marker := filepath.Join(n.dir, "runs")
	held := n.hold(t, "job-1", job(`echo ran >> "$MARKER"`, map[string]string{"MARKER": marker},
		events.OutputDecl{Path: "result.csv", Required: true}))
	n.append(t, "job-1", &events.CancelRequested{By: "alice"})

	n.handleHeld(t, held)
	n.handleHeld(t, held)

	names, stopped := n.log(t, "job-1")
	want := []string{"JobSubmitted", "ComputeHeld", "CancelRequested", "RunStopped"}
	if !slices.Equal(names, want) {
		t.Fatalf("job-1's log = %v, want %v", names, want)
	}
	if stopped.Outcome != events.Cancelled || stopped.ExitCode != nil {
		t.Errorf("RunStopped = %+v, want cancelled without an exit code", stopped)
	}
	if !slices.Equal(stopped.Output.Declared, []events.OutputDecl{{Path: "result.csv", Required: true}}) {
		t.Errorf("RunStopped declares %+v, want the job's output declaration", stopped.Output.Declared)
	}
	if got := runs(t, marker); got != 0 {
		t.Errorf("the job ran %d times, want never", got)
	}
}

// TestHandleHeldAfterTheNodeRestartedRecordsTheAttemptLost: the log shows a
// start without a stop (this node died while the job ran), and the hold is
// delivered again. The attempt is not run a second time.
func TestHandleHeldAfterTheNodeRestartedRecordsTheAttemptLost(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	marker := filepath.Join(n.dir, "runs")
	held := n.hold(t, "job-1", job(`echo ran >> "$MARKER"`, map[string]string{"MARKER": marker}))
	n.append(t, "job-1", &events.RunStarted{Hold: held.Event.(*events.ComputeHeld).Hold})

	n.handleHeld(t, held)

	names, stopped := n.log(t, "job-1")
	want := []string{"JobSubmitted", "ComputeHeld", "RunStarted", "RunStopped"}
	if !slices.Equal(names, want) {
		t.Fatalf("job-1's log = %v, want %v", names, want)
	}
	if stopped.Outcome != events.NodeLost {
		t.Errorf("RunStopped outcome = %s, want node_lost", stopped.Outcome)
	}
	if got := runs(t, marker); got != 0 {
		t.Errorf("the job ran %d times, want never again", got)
	}
}

// TestHandleHeldOfAHoldGivenUpAsLostDoesNotRun: the node was counted lost
// (its lease lapsed) before its hold reached it; the job is held again
// elsewhere, so this node must not run it.
func TestHandleHeldOfAHoldGivenUpAsLostDoesNotRun(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	marker := filepath.Join(n.dir, "runs")
	held := n.hold(t, "job-1", job(`echo ran >> "$MARKER"`, map[string]string{"MARKER": marker}))
	n.append(t, "job-1", &events.HoldLost{Hold: held.Event.(*events.ComputeHeld).Hold, Reason: "lease lapsed"})

	n.handleHeld(t, held)

	names, _ := n.log(t, "job-1")
	if want := []string{"JobSubmitted", "ComputeHeld", "HoldLost"}; !slices.Equal(names, want) {
		t.Errorf("job-1's log = %v, want %v", names, want)
	}
	if got := runs(t, marker); got != 0 {
		t.Errorf("the job ran %d times, want never", got)
	}
}

// TestHandleHeldDoesNotRecordAResultAfterTheHoldWasLost: while the job ran,
// the node was counted lost and the attempt given up; when the job then
// stops, its result stays off the log.
func TestHandleHeldDoesNotRecordAResultAfterTheHoldWasLost(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	ready := fifo(t, filepath.Join(n.dir, "ready"))
	held := n.hold(t, "job-1", job(`echo > "$READY"; exec sleep 30`, map[string]string{"READY": ready.path}))

	done := n.handleHeldAsync(held)
	ready.wait(t, n.ctx)
	n.append(t, "job-1", &events.HoldLost{Hold: held.Event.(*events.ComputeHeld).Hold, Reason: "lease lapsed"})
	if err := n.run.HandleCancel(n.ctx, n.append(t, "job-1", &events.CancelRequested{By: "alice"})); err != nil {
		t.Fatal(err)
	}
	n.returned(t, done, "after the cancel")

	names, _ := n.log(t, "job-1")
	if want := []string{"JobSubmitted", "ComputeHeld", "RunStarted", "HoldLost", "CancelRequested"}; !slices.Equal(names, want) {
		t.Errorf("job-1's log = %v, want %v: no RunStopped after HoldLost", names, want)
	}
}

// TestHandleHeldRunsTheNextAttemptOnTheSameNode: the node was counted lost
// while attempt 1 ran, and the job was held again on this same node (it came
// back). Attempt 2 arrives while attempt 1 is still stopping; it must run
// once attempt 1 is gone, not be taken for a second delivery of it.
func TestHandleHeldRunsTheNextAttemptOnTheSameNode(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	ready := fifo(t, filepath.Join(n.dir, "ready"))
	proceed := fifo(t, filepath.Join(n.dir, "proceed"))
	marker := filepath.Join(n.dir, "runs")
	spec := job(`echo "$E31_ATTEMPT" >> "$MARKER"
if [ "$E31_ATTEMPT" = 1 ]; then echo > "$READY"; read x < "$PROCEED"; fi`,
		map[string]string{"READY": ready.path, "PROCEED": proceed.path, "MARKER": marker})
	first := n.hold(t, "job-1", spec)
	hold := first.Event.(*events.ComputeHeld).Hold

	firstDone := n.handleHeldAsync(first)
	ready.wait(t, n.ctx)
	n.append(t, "job-1", &events.HoldLost{Hold: hold, Reason: "lease lapsed"})
	hold.Attempt = 2
	second := n.append(t, "job-1", &events.ComputeHeld{Hold: hold, Submitter: "alice", Spec: spec})
	secondDone := n.handleHeldAsync(second)
	if err := os.WriteFile(proceed.path, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.returned(t, firstDone, "for attempt 1")
	n.returned(t, secondDone, "for attempt 2")

	names, stopped := n.log(t, "job-1")
	want := []string{"JobSubmitted", "ComputeHeld", "RunStarted", "HoldLost", "ComputeHeld", "RunStarted", "RunStopped"}
	if !slices.Equal(names, want) {
		t.Fatalf("job-1's log = %v, want %v", names, want)
	}
	if stopped.Attempt != 2 || stopped.Outcome != events.Succeeded {
		t.Errorf("RunStopped = attempt %d %s, want attempt 2 succeeded", stopped.Attempt, stopped.Outcome)
	}
	if b, _ := os.ReadFile(marker); string(b) != "1\n2\n" {
		t.Errorf("attempts that ran: %q, want attempt 1 then attempt 2", b)
	}
}

func TestHandleHeldIgnoresAHoldOnAnotherNode(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	spec := job(`true`, nil)
	n.append(t, "job-1", &events.JobSubmitted{Submitter: "alice", Spec: spec})
	held := n.append(t, "job-1", &events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n2", CPU: 1, MemoryBytes: 256 << 20}, Submitter: "alice", Spec: spec})

	n.handleHeld(t, held)

	if names, _ := n.log(t, "job-1"); len(names) != 2 {
		t.Errorf("job-1's log = %v, want nothing after the hold on n2", names)
	}
}

// TestHandleHeldRecordsHowTheJobStopped: what the job did, as the record
// shows it.
func TestHandleHeldRecordsHowTheJobStopped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		script   string
		limit    float64
		outcome  events.Outcome
		exitCode *int
		reason   string
		missing  []string
	}{
		{name: "exits 0", script: `true`, outcome: events.Succeeded, exitCode: ptr(0), missing: []string{"result.csv"}},
		{name: "exits 3", script: `printf x > "$E31_OUTPUT/result.csv"; exit 3`, outcome: events.Failed, exitCode: ptr(3), reason: "exited with code 3", missing: []string{}},
		{name: "runs past its limit", script: `exec sleep 30`, limit: 0.2, outcome: events.LimitExceeded, reason: "ran past its limit", missing: []string{"result.csv"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := startNode(t, nil)
			spec := job(tt.script, nil, events.OutputDecl{Path: "result.csv", Required: true})
			if tt.limit > 0 {
				spec.Request.LimitSeconds = tt.limit
			}
			n.handleHeld(t, n.hold(t, "job-1", spec))
			_, stopped := n.log(t, "job-1")
			if stopped == nil {
				t.Fatal("no RunStopped")
			}
			if stopped.Outcome != tt.outcome || !strings.Contains(stopped.Reason, tt.reason) {
				t.Errorf("stopped %s (%q), want %s (%q)", stopped.Outcome, stopped.Reason, tt.outcome, tt.reason)
			}
			if (stopped.ExitCode == nil) != (tt.exitCode == nil) || (tt.exitCode != nil && *stopped.ExitCode != *tt.exitCode) {
				t.Errorf("exit code = %v, want %v", deref(stopped.ExitCode), deref(tt.exitCode))
			}
			if !slices.Equal(stopped.Output.Missing, tt.missing) {
				t.Errorf("missing = %q, want %q", stopped.Output.Missing, tt.missing)
			}
		})
	}
}

func ptr(i int) *int { return &i }

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestHandleHeldStagesTheJobsData(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	local := filepath.Join(n.dir, "input.txt")
	if err := os.WriteFile(local, []byte("twelve bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref, err := stage.Upload(n.ctx, n.store, local, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref.Name = "in"
	spec := job(`cp "$E31_DATA/in" "$E31_OUTPUT/copy"`, nil, events.OutputDecl{Path: "copy", Required: true})
	spec.Data = []events.DataRef{ref}

	n.handleHeld(t, n.hold(t, "job-1", spec))

	_, stopped := n.log(t, "job-1")
	if stopped == nil || stopped.Outcome != events.Succeeded {
		t.Fatalf("RunStopped = %+v, want succeeded", stopped)
	}
	if len(stopped.Output.Files) != 1 || stopped.Output.Files[0].Digest != ref.Digest {
		t.Errorf("output = %+v, want the input back, with digest %s", stopped.Output.Files, ref.Digest)
	}
}

// TestHandleCancelStopsARunningJobAndKeepsItsOutputSoFar: `e31 cancel` on a
// running job stops it, and what it wrote is collected.
func TestHandleCancelStopsARunningJobAndKeepsItsOutputSoFar(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	ready := fifo(t, filepath.Join(n.dir, "ready"))
	held := n.hold(t, "job-1", job(`printf so-far > "$E31_OUTPUT/part.txt"; echo > "$READY"; exec sleep 30`,
		map[string]string{"READY": ready.path}, events.OutputDecl{Path: "part.txt", Required: true}))

	done := n.handleHeldAsync(held)
	ready.wait(t, n.ctx)
	if err := n.run.HandleCancel(n.ctx, n.append(t, "job-1", &events.CancelRequested{By: "alice"})); err != nil {
		t.Fatal(err)
	}
	n.returned(t, done, "after the cancel")

	names, stopped := n.log(t, "job-1")
	want := []string{"JobSubmitted", "ComputeHeld", "RunStarted", "CancelRequested", "RunStopped"}
	if !slices.Equal(names, want) {
		t.Fatalf("job-1's log = %v, want %v", names, want)
	}
	if stopped.Outcome != events.Cancelled {
		t.Errorf("RunStopped outcome = %s (%s), want cancelled", stopped.Outcome, stopped.Reason)
	}
	if len(stopped.Output.Files) != 1 || stopped.Output.Files[0].Path != "part.txt" {
		t.Errorf("collected %+v, want part.txt, written before the cancel", stopped.Output.Files)
	}
}

// TestHandleCancelWhileStagingRecordsCancelled: a cancel that arrives while
// the node is still downloading the job's data is a cancel, not a failure.
func TestHandleCancelWhileStagingRecordsCancelled(t *testing.T) {
	t.Parallel()
	gate := &gatedStore{entered: make(chan struct{})}
	n := startNode(t, func(s stage.Store) stage.Store { gate.Store = s; return gate })
	local := filepath.Join(n.dir, "input.txt")
	if err := os.WriteFile(local, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref, err := stage.Upload(n.ctx, n.store, local, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref.Name = "in"
	spec := job(`true`, nil)
	spec.Data = []events.DataRef{ref}
	held := n.hold(t, "job-1", spec)

	done := n.handleHeldAsync(held)
	select {
	case <-gate.entered:
	case <-n.ctx.Done():
		t.Fatal("the node never started downloading the job's data")
	}
	if err := n.run.HandleCancel(n.ctx, n.append(t, "job-1", &events.CancelRequested{By: "alice"})); err != nil {
		t.Fatal(err)
	}
	n.returned(t, done, "after the cancel")

	_, stopped := n.log(t, "job-1")
	if stopped == nil {
		t.Fatal("no RunStopped")
	}
	if stopped.Outcome != events.Cancelled {
		t.Errorf("a cancel during staging is recorded as %s (%q), want cancelled", stopped.Outcome, stopped.Reason)
	}
}

// gatedStore is the real store, except that the first Get waits until its
// context ends: a download the test can catch in the middle.
type gatedStore struct {
	stage.Store
	once    sync.Once
	entered chan struct{}
}

func (g *gatedStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	first := false
	g.once.Do(func() { first = true })
	if !first {
		return g.Store.Get(ctx, name)
	}
	close(g.entered)
	<-ctx.Done()
	return nil, ctx.Err()
}

// readyPipe is a named pipe a job writes to when it has got somewhere.
type readyPipe struct{ path string }

func fifo(t *testing.T, path string) readyPipe {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return readyPipe{path}
}

// wait returns once the job has written to the pipe, or fails at ctx's end.
func (p readyPipe) wait(t *testing.T, ctx context.Context) {
	t.Helper()
	read := make(chan error, 1)
	go func() {
		_, err := os.ReadFile(p.path) // blocks until the job opens it, then to its close
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		// Let the reader go: opening for writing too never blocks.
		if f, err := os.OpenFile(p.path, os.O_RDWR, 0); err == nil {
			f.Close()
		}
		t.Fatal("the job never said it was ready")
	}
}
