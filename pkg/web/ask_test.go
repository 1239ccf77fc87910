package web

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
)

// TestThePageAsksABusyServiceAgain: a service at one of its limits
// answers busy, and the page asks again until it answers (the page's
// audit reads every page of the ledger's records so, while the page's own
// refreshes ask the same ledger); an answer that is an error of another
// kind is not asked again, and is told with the service's words.
func TestThePageAsksABusyServiceAgain(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	var asked, refused atomic.Int64
	s := query.New(srv.Conn(t), query.Config{Name: "e31-ledger", Version: "0.0.1"})
	s.Handle(wire.EndpointHead, wire.LedgerSubject("*", wire.EndpointHead), func(r *query.Request) {
		if asked.Add(1) <= 2 {
			r.Busy(query.ErrBusy)
			return
		}
		r.Respond(wire.LedgerInfo{LastSeq: 7})
	})
	s.Handle(wire.EndpointList, wire.LedgerSubject("*", wire.EndpointList), func(r *query.Request) {
		refused.Add(1)
		r.Respond(wire.ListReply{Error: "bad list request: no such thing"})
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
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	p := &Page{js: js}
	ctx := natstest.Context(t, 30*time.Second)

	var info wire.LedgerInfo
	if err := p.ask(ctx, wire.LedgerSubject(p.user(), wire.EndpointHead), nil, &info); err != nil || info.LastSeq != 7 {
		t.Fatalf("head from a service busy twice: %+v, %v", info, err)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("asked %d times, want 3 (2 busy)", n)
	}
	var list wire.ListReply
	err = p.ask(ctx, wire.LedgerSubject(p.user(), wire.EndpointList), wire.ListRequest{}, &list)
	if err == nil || !strings.Contains(err.Error(), "no such thing") {
		t.Errorf("an error answer: %v, want the service's words", err)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("an error answer was asked %d times, want once", n)
	}
}
