package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/services/ledger"
)

// TestServiceRecordIsUnchangedWhenTheLogIsDeliveredAgain runs the LEDGER as
// deployed. On start it rebuilds every record from the log; then it follows
// the log with the same reader, and events it has applied must not be
// applied again. The record it serves must be the one the log gives, once.
func TestServiceRecordIsUnchangedWhenTheLogIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 15*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)

	// The log of a job with two attempts, with the stream's own times.
	var last events.Envelope
	for _, env := range twoAttempts().envs {
		stored, err := pub.Append(ctx, env.Subject, env.Event)
		if err != nil {
			t.Fatal(err)
		}
		last = stored
	}
	// The record the stored messages give, digests included.
	want := mustJSON(t, projectStored(t, js).Record("retried-1"))

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

	// Once the rebuild has read the log, an event appended now reaches the
	// ledger as it follows the log.
	if rep := record(t, nc, "retried-1", last.Seq); rep.Record == nil {
		t.Fatalf("after the rebuild: %+v", rep)
	}
	later, err := pub.Append(ctx, "other-1", &events.JobSubmitted{Submitter: "dan", Spec: specOf("other")})
	if err != nil {
		t.Fatal(err)
	}
	rep := record(t, nc, "retried-1", later.Seq)
	if rep.Record == nil || rep.Applied < later.Seq {
		t.Fatalf("after the consumer caught up: %+v", rep)
	}
	if got := mustJSON(t, rep.Record); got != want {
		t.Errorf("served record:\n%s\nwant\n%s", got, want)
	}
}

// record asks the ledger for a job's record as of seq, waiting for it.
func record(t *testing.T, nc *nats.Conn, job string, seq uint64) wire.RecordReply {
	t.Helper()
	q, _ := json.Marshal(wire.RecordRequest{Job: job, MinSeq: seq, Wait: 10 * time.Second})
	// The service answers once Run has registered it: until then, retry.
	deadline := time.Now().Add(12 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var m *nats.Msg
	var err error
	for {
		m, err = query.Ask(ctx, nc, wire.LedgerSubject(events.Operator, wire.EndpointRecord), q)
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			break
		}
		<-time.After(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("ask for %s as of #%d: %v", job, seq, err)
	}
	var rep wire.RecordReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Error != "" {
		t.Fatalf("ask for %s as of #%d: %s", job, seq, rep.Error)
	}
	return rep
}
