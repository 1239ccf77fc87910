package release_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestRunReleasesAJobDespiteJunkOnItsSubjects: junk another tenant
// publishes on the job's subjects after its output was returned (before
// RELEASE reacts) is in the log, in no decision, and does not keep the
// compute held. Nothing Run started outlives it.
func TestRunReleasesAJobDespiteJunkOnItsSubjects(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction(natstest.LeftBySourcing)) })
	f := start(t)
	released := make(chan struct{}, 1)
	sub, err := f.js.Conn().Subscribe("e31.job.job-1.released", func(*nats.Msg) { released <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	f.log(t,
		&events.ComputeHeld{Hold: hold(1), Submitter: "alice"},
		&events.RunStarted{Hold: hold(1)},
		&events.RunStopped{Hold: hold(1), Outcome: events.Succeeded},
		returned(1, events.Succeeded))
	for _, subject := range []string{"e31.job.job-1.requested.mallory", "e31.job.job-1.cancel.mallory", "e31.job.job-1.delete.mallory"} {
		if _, err := f.js.Publish(f.ctx, subject, []byte("junk")); err != nil {
			t.Fatal(err)
		}
	}
	ctx, stop := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- f.svc.Run(ctx) }()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("job-1 was not released within 10s")
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
