package ledger_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/ledger"
)

// TestRunLeavesNothingRunning: Run rebuilds, follows, answers, and once its
// context ends returns nil with nothing it started still running: checked
// once the test's server and connections are gone (registered first, so
// it runs last).
func TestRunLeavesNothingRunning(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction(natstest.LeftBySourcing)) })
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 30*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	var last uint64
	for _, env := range twoAttempts().envs {
		stored, err := pub.Append(ctx, env.Subject, env.Event)
		if err != nil {
			t.Fatal(err)
		}
		last = stored.Seq
	}
	svc, err := ledger.New(nc, js, ledger.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	select {
	case <-svc.CaughtUp():
	case <-ctx.Done():
		t.Fatal("the ledger did not catch up")
	}
	if rep := record(t, nc, "retried-1", last); rep.Record == nil {
		t.Fatalf("after the rebuild: %+v", rep)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after its context ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context ending")
	}
}
