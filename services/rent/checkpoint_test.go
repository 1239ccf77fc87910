package rent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/rent"
)

// TestAPoolFromItsCheckpointDecidesAsTheWholeLogDoes: a pool made from a
// checkpoint (the node events before its From, its early cancels, and the
// log from From on) decides what the pool made from the whole log decides,
// for what comes after: a job held since long before the checkpoint, one
// queued behind it, a cancel that came before its job, a node announced at
// the start, and a job that runs after one that ended before From.
func TestAPoolFromItsCheckpointDecidesAsTheWholeLogDoes(t *testing.T) {
	t.Parallel()
	var h history
	whole := newPool()
	run := func(steps ...step) {
		applyAll(whole, h.log(steps...))
		applyAll(whole, h.stored(whole.Decide(16)))
	}
	run(announce("n1", 2), announce("n2", 1))
	for i := range 40 {
		id := fmt.Sprintf("before-%02d", i)
		run(submit(id, 1))
		run(release(id, 1, "n1", 1, true))
	}
	run(cancel("future"))    // long before the job is submitted
	run(cancel("pending"))   // the same, for a job submitted below
	run(submit("long", 2))   // held on n1 until the end
	run(submit("queued", 2)) // waits for n1
	run(submit("dep", 0.5))
	run(release("dep", 1, "n2", 0.5, true)) // ended, long before the checkpoint
	for i := range 40 {
		id := fmt.Sprintf("between-%02d", i)
		run(submit(id, 1))
		run(release(id, 1, "n2", 1, true))
	}
	// Submitted, its cancel not decided yet when the checkpoint is taken.
	applyAll(whole, h.log(submit("pending", 1)))

	c := whole.Checkpoint(uint64(len(h.envs)))
	if long := seqOf(t, h.envs, "long", events.TypeJobSubmitted); c.From != long {
		t.Fatalf("checkpoint from #%d, want #%d: the oldest live job's submission", c.From, long)
	}
	if len(c.Early) != 2 || c.Early[0].Job != "pending" || c.Early[1].Job != "future" || !slices.Equal(c.Early[1].By, []string{"alice"}) {
		t.Fatalf("checkpoint's early cancels %+v, want pending's (live) and future's by alice", c.Early)
	}
	restored := newPool()
	for _, env := range h.envs[:c.From-1] {
		switch env.Event.(type) {
		case *events.NodeAnnounced, *events.NodeExpired:
			restored.Apply(env)
		}
	}
	restored.Restore(c)
	applyAll(restored, h.envs[c.From-1:])
	if all, _ := restored.Tracked(); all >= 80 {
		t.Errorf("the pool made from the checkpoint keeps %d jobs: it read the jobs before it", all)
	}

	// What comes after is decided alike.
	for _, steps := range [][]step{
		{submit("future", 1)},
		{submit("after-dep", 1, after("dep"))},
		{release("long", 1, "n1", 2, true)},
		{release("queued", 1, "n1", 2, true)},
	} {
		envs := h.log(steps...)
		applyAll(whole, envs)
		applyAll(restored, envs)
		if p := restored.Unresolved(); len(p) > 0 {
			// As RENT's resolve does: the outcome of a job ended before
			// the checkpoint is read from the log.
			for _, id := range p {
				restored.Resolve(id, true, events.Succeeded, 0)
			}
		}
		decided := whole.Decide(16)
		want, got := describe(decided), describe(restored.Decide(16))
		if !slices.Equal(got, want) {
			t.Errorf("after %s's %T: the pool from the checkpoint decides %v, the whole log's %v", steps[0].subject, steps[0].ev, got, want)
		}
		stored := h.stored(decided)
		applyAll(whole, stored)
		applyAll(restored, stored)
	}
}

// TestACheckpointOfARestoredPoolIsNoEarlier: a pool made from a checkpoint
// of a log whose jobs had all ended, with nothing logged since, writes a
// checkpoint as far on, not one at its last node event: the RENT after it
// would read the whole log again.
func TestACheckpointOfARestoredPoolIsNoEarlier(t *testing.T) {
	t.Parallel()
	var h history
	whole := newPool()
	applyAll(whole, h.log(announce("n1", 1)))
	for i := range 10 {
		id := fmt.Sprintf("job-%d", i)
		applyAll(whole, h.log(submit(id, 1)))
		applyAll(whole, h.stored(whole.Decide(1)))
		applyAll(whole, h.log(release(id, 1, "n1", 1, true)))
	}
	n := uint64(len(h.envs))
	c := whole.Checkpoint(n)
	if c.From != n+1 {
		t.Fatalf("with no live job the checkpoint starts at #%d, want #%d", c.From, n+1)
	}
	restored := newPool()
	applyAll(restored, h.envs[:1]) // the node's announcement
	restored.Restore(c)
	if again := restored.Checkpoint(c.From - 1); again.From != c.From {
		t.Errorf("the restored pool's checkpoint starts at #%d, want #%d", again.From, c.From)
	}
}

// seqOf is the sequence of the first event of type typ about job.
func seqOf(t *testing.T, envs []events.Envelope, job, typ string) uint64 {
	t.Helper()
	for _, env := range envs {
		if env.Subject == job && env.Type == typ {
			return env.Seq
		}
	}
	t.Fatalf("no %s about %s", typ, job)
	return 0
}

// TestRentStartsFromItsCheckpoint: a RENT that stops writes its
// checkpoint, and the RENT that starts next reads the log from the oldest
// live job's submission, not from the beginning: it knows nothing of the
// jobs that ended before, and holds the job that waits, on the node
// announced at the start, once there is room.
func TestRentStartsFromItsCheckpoint(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	appendStep := appender(t, ctx, js)
	leases, err := js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Put(ctx, "node.n1", []byte("boot-1")); err != nil {
		t.Fatal(err)
	}

	first, err := rent.New(srv.Conn(t), js, rent.Config{Instance: "rent-1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- first.Run(runCtx) }()
	appendStep(announce("n1", 1))
	for i := range 20 {
		id := fmt.Sprintf("before-%02d", i)
		appendStep(submit(id, 1))
		h := waitFor(t, ctx, js, id, events.TypeComputeHeld).Event.(*events.ComputeHeld)
		appendStep(release(id, h.Attempt, "n1", 1, true))
	}
	long := appendStep(submit("long", 1))
	h := waitFor(t, ctx, js, "long", events.TypeComputeHeld).Event.(*events.ComputeHeld)
	queued := appendStep(submit("queued", 1))
	if err := first.WaitApplied(ctx, queued.Seq); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("the first RENT stopped with %v", err)
	}

	kv, err := js.KeyValue(ctx, events.RentBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, events.RentCheckpointKey)
	if err != nil {
		t.Fatalf("no checkpoint once RENT stopped: %v", err)
	}
	var c rent.Checkpoint
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		t.Fatal(err)
	}
	if c.From != long.Seq {
		t.Fatalf("the checkpoint starts at #%d, want #%d, the oldest live job's submission", c.From, long.Seq)
	}

	second := runRent(t, srv, js, "rent-2")
	if _, err := leases.Put(ctx, "node.n1", []byte("boot-1")); err != nil {
		t.Fatal(err)
	}
	appendStep(release("long", h.Attempt, "n1", 1, true))
	if held := waitFor(t, ctx, js, "queued", events.TypeComputeHeld).Event.(*events.ComputeHeld); held.Node != "n1" {
		t.Errorf("queued held on %s, want n1", held.Node)
	}
	if all, live, _ := second.svc.Tracked(); all > 3 || live != 1 {
		t.Errorf("the RENT started from the checkpoint keeps %d jobs, %d live; want at most long and queued, and queued live", all, live)
	}
}
