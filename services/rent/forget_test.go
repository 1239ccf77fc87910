package rent_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/rent"
)

// TestRentForgetsEndedJobsAndStaysRight: after many jobs end, RENT keeps
// nothing of them but its bounded memory of the last few; a late cancel
// and a second copy of a release of a job it forgot neither hold it again
// nor give back compute that is held; a job that runs after one it forgot
// learns that job's outcome from the log.
func TestRentForgetsEndedJobsAndStaysRight(t *testing.T) {
	noLeaks(t)
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	pub := bus.NewPublisher(js, "e31/test", nil)
	const remember = 3
	svc, err := rent.New(srv.Conn(t), js, rent.Config{Instance: "a", Logger: quiet, Pool: rent.PoolConfig{RememberEnded: remember}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("RENT ended with %v, want nothing but the cancel", err)
		}
	})

	appendStep := appender(t, ctx, js)
	heldThenReleased := func(job string, outcome events.Outcome) events.Envelope {
		t.Helper()
		appendStep(submit(job, 2))
		h := waitFor(t, ctx, js, job, events.TypeComputeHeld).Event.(*events.ComputeHeld)
		return appendStep(ended(job, h.Attempt, h.Node, h.CPU, outcome, true))
	}
	appendStep(announce("n1", 2))
	const n = 12
	jobs := make([]string, n)
	var last events.Envelope
	for i := range jobs {
		jobs[i] = "job-" + string(rune('a'+i))
		outcome := events.Succeeded
		if i == 1 {
			outcome = events.Failed
		}
		last = heldThenReleased(jobs[i], outcome)
	}
	if err := svc.WaitApplied(ctx, last.Seq); err != nil {
		t.Fatal(err)
	}
	if all, live, traces := svc.Tracked(); all > remember || live != 0 || traces != 0 {
		t.Fatalf("after %d jobs ended RENT keeps %d jobs (%d live) and %d traces, want at most %d, none live, no trace", n, all, live, traces, remember)
	}
	if r := svc.Why(jobs[0]); r.State != "unknown" {
		t.Errorf("why of a job ended long ago: %+v, want it forgotten", r)
	}

	// big takes the whole node; a late copy of the release of a forgotten
	// job must not give any of it back, or small would be held beside it.
	appendStep(submit("big", 2))
	big := waitFor(t, ctx, js, "big", events.TypeComputeHeld).Event.(*events.ComputeHeld)
	appendStep(cancel(jobs[0]))
	dup := events.New(jobs[0], ended(jobs[0], 1, "n1", 2, events.Succeeded, true).ev, "e31/release/test", time.Now())
	dup.ID += "-again" // stored again, past any duplicate window
	if _, err := pub.AppendEnvelope(ctx, dup); err != nil {
		t.Fatal(err)
	}
	late := appendStep(submit("small", 1))
	if err := svc.WaitApplied(ctx, late.Seq); err != nil {
		t.Fatal(err)
	}
	if err := svc.Schedule(ctx); err != nil {
		t.Fatal(err)
	}
	if r := svc.Why("small"); r.State != "waiting" {
		t.Fatalf("small while big holds the whole node, after a late release of a forgotten job: %+v, want waiting", r)
	}
	history, err := bus.ReadJob(ctx, js, jobs[0], 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range history {
		switch e.Event.(type) {
		case *events.ComputeHeld, *events.JobCancelled:
			if e.Seq > last.Seq {
				t.Errorf("a forgotten job decided on again after its end: %s", e)
			}
		}
	}
	// Released, big's compute goes to small: nothing was lost.
	appendStep(ended("big", big.Attempt, big.Node, big.CPU, events.Succeeded, true))
	waitFor(t, ctx, js, "small", events.TypeComputeHeld)

	// Jobs that run after forgotten ones: one that succeeded lets its
	// dependent be held, one that failed has its dependent rejected.
	appendStep(submit("after-ok", 1, after(jobs[0])))
	waitFor(t, ctx, js, "after-ok", events.TypeComputeHeld)
	appendStep(submit("after-failed", 1, after(jobs[1])))
	waitFor(t, ctx, js, "after-failed", events.TypeJobRejected)
}
