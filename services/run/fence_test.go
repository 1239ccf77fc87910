package run_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// TestANodeThatCannotRenewStopsItsJobsBeforeItsLeaseCanLapse: a node whose
// lease renewals all fail (the leases bucket refuses writes: what a node
// sees of a partition between it and the bucket's leader, while its
// events still flow) kills its job, which ignores SIGTERM, before the
// lease could expire on the server; records the stop as node_lost with
// nothing of the job stored; cleans the workspace; starts nothing while
// fenced; and joins again as a new boot once renewals succeed.
func TestANodeThatCannotRenewStopsItsJobsBeforeItsLeaseCanLapse(t *testing.T) {
	t.Parallel()
	// The node's lease lives a TTL of 2.25 s in the nodes' bucket, where
	// it renews it (RENT sees it lapse in the leases bucket, a TTL of 3 s
	// after its last copy): fence margin 562 ms, SIGTERM at 1.69 s, SIGKILL
	// at 1.97 s.
	const ttl = 3 * time.Second
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	natstest.LeaseTTL(ctx, t, js, ttl)
	kv, err := js.KeyValue(ctx, events.NodeLeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	work, dir := t.TempDir(), t.TempDir()
	exec, err := executor.NewProcess(work)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := run.New(js, run.Config{Node: "n1", CPU: 2, MemoryBytes: 1 << 30, DiskBytes: 1 << 30,
		Executor: exec, Grace: 10 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	announced := nextOn(ctx, t, js, "e31.node.n1.announced", 1)

	// The job ignores SIGTERM, and so does its child: only SIGKILL ends it.
	pidFile := filepath.Join(dir, "pid")
	n := &node{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/test", nil)}
	spec := job(`trap '' TERM; echo $$ > "$PIDFILE.tmp"; mv "$PIDFILE.tmp" "$PIDFILE"; while :; do sleep 1; done`,
		map[string]string{"PIDFILE": pidFile, "PATH": "/usr/bin:/bin"})
	n.hold(t, "fenced", spec)
	pid := waitPID(ctx, t, pidFile)

	allow := natstest.RefuseWrites(ctx, t, js, events.KVStream(events.NodeLeasesBucket))
	// The last renewal stored is the key's revision now: the server
	// expires it a TTL after it stored it, by its clock, which is this
	// machine's.
	last, err := kv.Get(ctx, "node.n1")
	if err != nil {
		t.Fatal(err)
	}
	expires := last.Created().Add(events.NodeLeaseTTL(ttl))
	dead := waitGone(ctx, t, pid)
	if !dead.Before(expires) {
		t.Fatalf("the job died %s after its node's lease could expire", dead.Sub(expires))
	}
	t.Logf("the job (deaf to SIGTERM) was killed %s after the last renewal was stored, %s before the lease could expire (TTL %s)",
		dead.Sub(last.Created()).Round(time.Millisecond), expires.Sub(dead).Round(time.Millisecond), events.NodeLeaseTTL(ttl))

	stopped := nextOn(ctx, t, js, "e31.job.fenced.stopped.n1", 1).Event.(*events.RunStopped)
	if stopped.Outcome != events.NodeLost || !strings.Contains(stopped.Reason, "could not renew its lease") {
		t.Errorf("the fenced job's stop: %s (%q), want node_lost saying the node could not renew its lease", stopped.Outcome, stopped.Reason)
	}
	if stopped.Logs != nil || len(stopped.Output.Files) > 0 {
		t.Errorf("the fenced job's stop stores logs %+v and output %+v, want none", stopped.Logs, stopped.Output)
	}
	if left, _ := os.ReadDir(work); len(left) > 0 {
		t.Errorf("the fenced job's workspace is left: %v", left)
	}

	// Fenced, the node starts nothing: a job held now waits for its new
	// lease, and starts after the node announced itself again.
	n.hold(t, "after", job(`true`, nil))
	allow()
	again := nextOn(ctx, t, js, "e31.node.n1.announced", 2)
	if again.Event.(*events.NodeAnnounced).Boot == announced.Event.(*events.NodeAnnounced).Boot {
		t.Errorf("the node joined again under its old boot, want a new one")
	}
	if s := nextOn(ctx, t, js, "e31.job.after.stopped.n1", 1).Event.(*events.RunStopped); s.Outcome != events.Succeeded {
		t.Errorf("the job held while the node was fenced: %s (%q), want succeeded once it joined again", s.Outcome, s.Reason)
	}
	if started := nextOn(ctx, t, js, "e31.job.after.started.n1", 1); started.Seq < again.Seq {
		t.Errorf("a job started (#%d) while the node was fenced, before it joined again (#%d)", started.Seq, again.Seq)
	}
}

// nextOn waits for the nth event on subject (from the log's start).
func nextOn(ctx context.Context, t *testing.T, js jetstream.JetStream, subject string, nth int) events.Envelope {
	t.Helper()
	f, err := bus.Follow(ctx, js, []string{subject}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	for seen := 0; ; {
		m, _, err := f.Next()
		if err != nil {
			t.Fatalf("waiting for event %d on %s: %v", nth, subject, err)
		}
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			continue
		}
		if seen++; seen == nth {
			env.Seq = m.Sequence
			return env
		}
	}
}

// waitPID waits for the job to write its pid.
func waitPID(ctx context.Context, t *testing.T, path string) int {
	t.Helper()
	for {
		if b, err := os.ReadFile(path); err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		select {
		case <-ctx.Done():
			t.Fatal("the job never started")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitGone waits until process pid is gone (or a zombie) and returns when
// it was first seen so, to 5 ms.
func waitGone(ctx context.Context, t *testing.T, pid int) time.Time {
	t.Helper()
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return time.Now()
		}
		select {
		case <-ctx.Done():
			t.Fatal("the job was never stopped")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// blockedPuts is the real store, except that every Put waits until its
// context ends, once entered is closed: a store cut off mid-upload.
type blockedPuts struct {
	stage.Store
	once    sync.Once
	entered chan struct{}
}

func (b *blockedPuts) Put(ctx context.Context, name, digest string, size int64, r io.Reader) error {
	b.once.Do(func() { close(b.entered) })
	<-ctx.Done()
	return ctx.Err()
}

// TestAFenceStopsTheStoringOfAJobsOutput: a job that ended by itself just
// before its node was cut off is not waited on while its output is
// stored: the fence stops the storing, and nothing of the attempt is
// recorded but its stop, node_lost.
func TestAFenceStopsTheStoringOfAJobsOutput(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	natstest.LeaseTTL(ctx, t, js, ttl)
	obs, err := js.ObjectStore(ctx, events.DataBucket)
	if err != nil {
		t.Fatal(err)
	}
	store := &blockedPuts{Store: stage.NewObjectStore(obs), entered: make(chan struct{})}
	exec, err := executor.NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := run.New(js, run.Config{Node: "n1", CPU: 2, MemoryBytes: 1 << 30, DiskBytes: 1 << 30,
		Executor: exec, Store: store, Grace: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	nextOn(ctx, t, js, "e31.node.n1.announced", 1)
	n := &node{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/test", nil)}
	n.hold(t, "stored", job(`echo hi; echo hi > "$E31_OUTPUT/o.txt"`, nil, events.OutputDecl{Path: "o.txt", Required: true}))
	select {
	case <-store.entered:
	case <-ctx.Done():
		t.Fatal("the job's output was never stored")
	}
	allow := natstest.RefuseWrites(ctx, t, js, events.KVStream(events.NodeLeasesBucket))
	defer allow()
	stopped := nextOn(ctx, t, js, "e31.job.stored.stopped.n1", 1).Event.(*events.RunStopped)
	if stopped.Outcome != events.NodeLost || !strings.Contains(stopped.Reason, "could not renew its lease") {
		t.Errorf("the stop: %s (%q), want node_lost, the node fenced while it stored the output", stopped.Outcome, stopped.Reason)
	}
	if stopped.Logs != nil || len(stopped.Output.Files) > 0 || stopped.ExitCode != nil {
		t.Errorf("the fenced attempt's stop says logs %+v, output %+v, exit code %v; want none", stopped.Logs, stopped.Output.Files, stopped.ExitCode)
	}
}
