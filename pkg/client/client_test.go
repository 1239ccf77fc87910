package client

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
)

// busyClient is a client, asking as the operator, of a query service
// that answers "busy" to the first busyFor requests.
func busyClient(t *testing.T, busyFor int64) (*Client, *atomic.Int64) {
	t.Helper()
	srv := natstest.Start(t)
	var asked atomic.Int64
	s := query.New(srv.Conn(t), query.Config{Name: "e31-ledger", Version: "0.0.1"})
	s.Handle(wire.EndpointHead, wire.LedgerSubject("*", wire.EndpointHead), func(r *query.Request) {
		if asked.Add(1) <= busyFor {
			r.Busy(query.ErrBusy)
			return
		}
		r.Respond(wire.LedgerInfo{LastSeq: 7})
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	nc, err := srv.Connect(t.Name(), nats.CustomInboxPrefix(query.InboxPrefix(events.Operator)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &Client{nc: nc, who: Identity{Name: "test", User: events.Operator}, refusals: &refusals{waiting: map[*refusalWatch]struct{}{}}}, &asked
}

// TestBusyIsAskedAgain: the client asks a busy service again, with backoff,
// and gets its answer once the service has room.
func TestBusyIsAskedAgain(t *testing.T) {
	t.Parallel()
	c, asked := busyClient(t, 3)
	var info wire.LedgerInfo
	if err := c.request(context.Background(), c.ledger(wire.EndpointHead), nil, &info, 10*time.Second); err != nil || info.LastSeq != 7 {
		t.Fatalf("head: %+v, %v", info, err)
	}
	if n := asked.Load(); n != 4 {
		t.Errorf("asked %d times, want 4 (3 busy)", n)
	}
}

// TestBusyUntilTheDeadlineSaysSo: a service busy for longer than the
// request may take fails the request with the service's reason.
func TestBusyUntilTheDeadlineSaysSo(t *testing.T) {
	t.Parallel()
	c, asked := busyClient(t, 1<<40)
	var info wire.LedgerInfo
	err := c.request(context.Background(), c.ledger(wire.EndpointHead), nil, &info, time.Second)
	if !errors.Is(err, ErrBusy) || asked.Load() < 2 {
		t.Errorf("after %d busy answers: %v, want the service's busy", asked.Load(), err)
	}
}
