package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestTailRebuildsThenFollows: a projection over a Tail applies the log as
// it was, in order and in batches, is told once that it caught up, then
// applies what is logged afterwards, junk and all, and whoever waits for a
// sequence is let through once it is applied.
func TestTailRebuildsThenFollows(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	pub := bus.NewPublisher(js, "e31/test", nil)
	for i := range 5 {
		if _, err := pub.Append(ctx, "job-"+string(rune('a'+i)), &events.JobSubmitted{Submitter: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	junked := junk(t, ctx, js, "job-a", "mallory", true)

	var seqs []uint64 // Run's goroutine only, until it returns
	var caughtUp atomic.Int32
	var atCatchUp atomic.Uint64
	tail := bus.NewTail(js, bus.TailOptions{Batch: 2, CaughtUp: func(context.Context) {
		caughtUp.Add(1)
		atCatchUp.Store(uint64(len(seqs)))
	}})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- tail.Run(runCtx, func(_ context.Context, msgs []*jetstream.RawStreamMsg) error {
			if len(msgs) > 2 {
				t.Errorf("a batch of %d, want at most 2", len(msgs))
			}
			for _, m := range msgs {
				seqs = append(seqs, m.Sequence)
			}
			return nil
		})
	}()
	select {
	case <-tail.CaughtUp():
	case <-ctx.Done():
		t.Fatal("the tail did not catch up")
	}
	if got, want := tail.Applied(), uint64(5+junked); got != want {
		t.Errorf("applied at the catch-up: #%d, want #%d", got, want)
	}
	if !tail.Live() {
		t.Error("not live after the catch-up")
	}

	env, err := pub.Append(ctx, "job-z", &events.JobSubmitted{Submitter: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tail.WaitFor(ctx, env.Seq); err != nil {
		t.Fatal(err)
	}
	if err := tail.WaitCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run after its context ended: %v", err)
	}
	if n := caughtUp.Load(); n != 1 {
		t.Errorf("told it caught up %d times, want once", n)
	}
	if n := atCatchUp.Load(); n != uint64(5+junked) {
		t.Errorf("told it caught up after %d messages, want %d", n, 5+junked)
	}
	for i, seq := range seqs {
		if seq != uint64(i+1) {
			t.Fatalf("applied %v, want every sequence once in order", seqs)
		}
	}
	if len(seqs) != 6+junked {
		t.Errorf("applied %d messages, want %d", len(seqs), 6+junked)
	}
}

// TestTailOfAnEmptyLogIsCaughtUpAtOnce, and a waiter for a sequence not yet
// logged is told how far the projection is when it gives up. Nothing Run
// started outlives it: checked once the server and the connections are
// gone (registered first, so it runs last; not parallel, so that no other
// test's goroutines count).
func TestTailOfAnEmptyLogIsCaughtUpAtOnce(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction(natstest.LeftBySourcing)) })
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	tail := bus.NewTail(js, bus.TailOptions{})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- tail.Run(runCtx, func(context.Context, []*jetstream.RawStreamMsg) error { return nil })
	}()
	select {
	case <-tail.CaughtUp():
	case <-ctx.Done():
		t.Fatal("the tail of an empty log did not catch up")
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := tail.WaitFor(wctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting for #1 of an empty log: %v, want the deadline", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestTailEndsWhenItsProjectionFails: reading again cannot help a
// projection that cannot apply what it read, Again or not.
func TestTailEndsWhenItsProjectionFails(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	if _, err := bus.NewPublisher(js, "e31/test", nil).Append(ctx, "job-1", &events.JobSubmitted{Submitter: "alice"}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	tail := bus.NewTail(js, bus.TailOptions{Again: true})
	err := tail.Run(ctx, func(context.Context, []*jetstream.RawStreamMsg) error { return boom })
	if !errors.Is(err, boom) {
		t.Errorf("Run: %v, want the projection's error", err)
	}
	if tail.Applied() != 0 {
		t.Errorf("applied #%d after a failed apply, want nothing", tail.Applied())
	}
}

// TestDecodedSkipsWhatIsNotAnEvent: the events reach the fold with their
// sequence; junk does not.
func TestDecodedSkipsWhatIsNotAnEvent(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	pub := bus.NewPublisher(js, "e31/test", nil)
	first, err := pub.Append(ctx, "job-1", &events.JobSubmitted{Submitter: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	junked := junk(t, ctx, js, "job-1", "mallory", true)
	last, err := pub.Append(ctx, "job-1", &events.JobCancelled{Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	tail := bus.NewTail(js, bus.TailOptions{})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- tail.Run(runCtx, bus.Decoded(nil, func(_ context.Context, env events.Envelope) error {
			got = append(got, env.Seq)
			return nil
		}))
	}()
	if err := tail.WaitFor(ctx, last.Seq); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The forged hold in the junk is a valid event on a wrong subject: it
	// decodes, and is the projection's to judge. The rest is skipped.
	if len(got) < 2 || got[0] != first.Seq || got[len(got)-1] != last.Seq || len(got) >= 2+junked {
		t.Errorf("folded %v, want #%d first, #%d last, and not all the %d junk messages", got, first.Seq, last.Seq, junked)
	}
}
