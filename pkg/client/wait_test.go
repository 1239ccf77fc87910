package client

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
)

// TestWaitOutlastsALedgerThatIsNotListeningYet: a wait begun while no
// ledger listens (one restarting reads its bucket first) asks again, and
// returns the record once a ledger answers, instead of failing with
// "nothing answers" (a system test waited on a job right after e31 dev
// restarted, and failed so).
func TestWaitOutlastsALedgerThatIsNotListeningYet(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, err := srv.Connect(t.Name(), nats.CustomInboxPrefix(query.InboxPrefix(events.Operator)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := &Client{nc: nc, who: Identity{Name: "test", User: events.Operator}, refusals: &refusals{waiting: map[*refusalWatch]struct{}{}}}
	const job = "01a24302-65a7-7e27-8d67-44c4139a7eb9"
	type result struct {
		rec *hold.HoldRecord
		err error
	}
	done := make(chan result, 1)
	answered := nc.Stats().InMsgs
	go func() {
		rec, err := c.Wait(context.Background(), job, 20*time.Second)
		done <- result{rec, err}
	}()
	// The wait has asked, and heard that nobody listens, before the
	// ledger comes.
	deadline := time.Now().Add(10 * time.Second)
	for nc.Stats().InMsgs == answered {
		if time.Now().After(deadline) {
			t.Fatal("the wait never asked")
		}
		select {
		case r := <-done:
			t.Fatalf("the wait ended before any ledger listened: %+v, %v", r.rec, r.err)
		case <-time.After(time.Millisecond):
		}
	}
	s := query.New(srv.Conn(t), query.Config{Name: "e31-ledger", Version: "0.0.1"})
	s.Handle(wire.EndpointRecord, wire.LedgerSubject("*", wire.EndpointRecord), func(r *query.Request) {
		r.Respond(wire.RecordReply{Record: &hold.HoldRecord{Job: job, State: hold.StateReleased}})
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	r := <-done
	if r.err != nil || r.rec == nil || !r.rec.Over() {
		t.Fatalf("wait: %+v, %v; want the record, over", r.rec, r.err)
	}
}
