package run_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/e31net/e31/services/run"
)

// TestAStuckTryIsGivenUp: a request sent to a server that was then killed
// is never answered, and the client waits until its context ends. A step
// on the node (opening the job's store, storing its logs) must give such a
// try up after its own bound and make it again, not wait out the job's
// whole limit: after a NATS restart, jobs ended limit_exceeded that way.
func TestAStuckTryIsGivenUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tries := 0
	err := run.Again(ctx, slog.New(slog.DiscardHandler), "asking a server that died", 100*time.Millisecond, func(ctx context.Context) error {
		tries++
		if tries == 1 {
			// The answer that never comes.
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the step failed: %v", err)
	}
	if tries != 2 {
		t.Errorf("%d tries, want the stuck one and one more", tries)
	}
	if ctx.Err() != nil {
		t.Error("the step used up its whole deadline")
	}
}
