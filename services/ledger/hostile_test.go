package ledger_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/ledger"
)

// TestTheLedgerReadsPastWhatATenantStored: empty messages with a Status
// header, which any tenant may store on its own tail of a job's subjects,
// stopped nats.go's ordered consumer for ever, and the ledger with it. The
// records logged after them are served, during the rebuild and live.
func TestTheLedgerReadsPastWhatATenantStored(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 30*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	forge := func() {
		t.Helper()
		for _, status := range []string{"100", "409", "503"} {
			m := nats.NewMsg("e31.job.any.delete.mallory")
			m.Header.Set("Status", status)
			m.Header.Set("Description", "Consumer Deleted")
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	forge()
	before, err := pub.Append(ctx, "before", &events.JobSubmitted{Submitter: "dan", Spec: specOf("before")})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := ledger.New(nc, js, ledger.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	if rep := record(t, nc, "before", before.Seq); rep.Record == nil {
		t.Fatalf("the job logged after the forged statuses, in the rebuild: %+v", rep)
	}
	forge()
	after, err := pub.Append(ctx, "after", &events.JobSubmitted{Submitter: "dan", Spec: specOf("after")})
	if err != nil {
		t.Fatal(err)
	}
	if rep := record(t, nc, "after", after.Seq); rep.Record == nil {
		t.Fatalf("the job logged after more forged statuses, live: %+v", rep)
	}
}
