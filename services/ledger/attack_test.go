package ledger_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/querytest"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/services/ledger"
)

// hostile is a ledger on a server with authentication on, running under
// the ledger's own credentials, over a log with one job of alice's and one
// of bob's; the tenants ask with plain nats.go clients holding nothing but
// their submitter credentials.
type hostile struct {
	qs         *querytest.Server
	svc        *ledger.Service
	alice, bob *nats.Conn
	ctx        context.Context
}

func startHostile(t *testing.T) *hostile {
	t.Helper()
	qs := querytest.Start(t)
	ctx := natstest.Context(t, 60*time.Second)
	pub := bus.NewPublisher(qs.JetStream(t, querytest.Operator), "e31/test", nil)
	for job, who := range map[string]string{"alices": "alice", "bobs": "bob"} {
		for _, ev := range []events.Event{&events.JobRequested{Submitter: who, Spec: specOf(job)}, &events.JobSubmitted{Submitter: who, Spec: specOf(job)}} {
			if _, err := pub.Append(ctx, job, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	nc := qs.Conn(t, querytest.Service(auth.LedgerService))
	js := qs.JetStream(t, querytest.Service(auth.LedgerService))
	svc := runLedger(t, ctx, nc, js)
	<-svc.CaughtUp()
	return &hostile{qs: qs, svc: svc, ctx: ctx,
		alice: qs.Conn(t, querytest.Submitter("alice")), bob: qs.Conn(t, querytest.Submitter("bob"))}
}

// ask asks as the user nc is connected as, on its own inbox.
func (h *hostile) ask(t *testing.T, nc *nats.Conn, subject string, q, reply any) time.Duration {
	t.Helper()
	b, _ := json.Marshal(q)
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	m, err := nc.RequestWithContext(ctx, subject, b)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		t.Fatalf("%s: %q: %v", subject, m.Data, err)
	}
	return took
}

// TestNoAnswerLandsAnywhereButTheAskersInbox: for every endpoint, a
// submitter that names a lease key, an object store, an event subject,
// the JetStream API or another identity's inbox as its reply subject (or
// none) gets nothing published there, and each such request is counted.
func TestNoAnswerLandsAnywhereButTheAskersInbox(t *testing.T) {
	t.Parallel()
	h := startHostile(t)
	bodies := map[string]any{
		wire.EndpointRecord: wire.RecordRequest{Job: "alices"},
		wire.EndpointList:   wire.ListRequest{},
		wire.EndpointTotals: wire.TotalsRequest{},
		wire.EndpointEvents: wire.EventsRequest{Job: "alices"},
		wire.EndpointHead:   nil,
	}
	for _, ep := range wire.LedgerEndpoints {
		b, _ := json.Marshal(bodies[ep])
		h.qs.AssertNothingLands(t, h.alice, wire.LedgerSubject("alice", ep), b, func() uint64 { return h.svc.QueryStats().Refused })
	}
}

// TestLongPollsOfOneTenantDelayNoOtherAndAreCapped: while bob holds 50
// long polls open, alice's record queries (as `e31 status` asks: fresh)
// answer with a p99 of at most 100 ms; bob's 51st long poll and beyond are
// answered busy at once.
func TestLongPollsOfOneTenantDelayNoOtherAndAreCapped(t *testing.T) {
	t.Parallel()
	h := startHostile(t)
	pollCtx, stopPolls := context.WithCancel(h.ctx)
	var polls sync.WaitGroup
	defer func() { stopPolls(); polls.Wait() }()
	poll, _ := json.Marshal(wire.RecordRequest{Job: "bobs", UntilOver: true, Wait: 30 * time.Second})
	for range query.DefaultLongPollsPerUser {
		polls.Go(func() { _, _ = h.bob.RequestWithContext(pollCtx, wire.LedgerSubject("bob", wire.EndpointRecord), poll) })
	}
	deadline := time.Now().Add(20 * time.Second)
	for h.svc.QueryStats().LongPolls < query.DefaultLongPollsPerUser {
		if time.Now().After(deadline) {
			t.Fatalf("bob's long polls not all held: %+v", h.svc.QueryStats())
		}
		<-time.After(2 * time.Millisecond)
	}

	const n = 200
	took := make([]time.Duration, 0, n)
	for range n {
		var rep wire.RecordReply
		took = append(took, h.ask(t, h.alice, wire.LedgerSubject("alice", wire.EndpointRecord), wire.RecordRequest{Job: "alices", Fresh: true, Wait: 10 * time.Second}, &rep))
		if rep.Record == nil || rep.Record.Job != "alices" {
			t.Fatalf("alice's record: %+v", rep)
		}
	}
	slices.Sort(took)
	p50, p99 := took[n/2], took[n*99/100-1]
	t.Logf("alice's fresh record query under %d long polls of bob's: p50 %s, p99 %s, max %s (%d queries)",
		query.DefaultLongPollsPerUser, p50, p99, took[n-1], n)
	if p99 > 100*time.Millisecond {
		t.Errorf("p99 %s, want at most 100 ms", p99)
	}

	for range 5 {
		var rep wire.RecordReply
		h.ask(t, h.bob, wire.LedgerSubject("bob", wire.EndpointRecord), wire.RecordRequest{Job: "bobs", UntilOver: true, Wait: 30 * time.Second}, &rep)
		if rep.Code != wire.CodeBusy || !strings.HasPrefix(rep.Error, "busy: ") || !strings.HasSuffix(rep.Error, ", retry") || rep.Record != nil {
			t.Errorf("bob's long poll beyond %d: %+v, want busy", query.DefaultLongPollsPerUser, rep)
		}
	}
	var evs wire.EventsReply
	h.ask(t, h.bob, wire.LedgerSubject("bob", wire.EndpointEvents), wire.EventsRequest{Job: "bobs", After: 1 << 40, Wait: 30 * time.Second}, &evs)
	if evs.Code != wire.CodeBusy {
		t.Errorf("bob's events long poll beyond the cap: %+v, want busy", evs)
	}
	// A question that does not wait is still answered.
	var rep wire.RecordReply
	h.ask(t, h.bob, wire.LedgerSubject("bob", wire.EndpointRecord), wire.RecordRequest{Job: "bobs"}, &rep)
	if rep.Record == nil {
		t.Errorf("bob's plain question beside his long polls: %+v", rep)
	}
	if st := h.svc.QueryStats(); st.Busy != 6 || st.LongPolls != query.DefaultLongPollsPerUser {
		t.Errorf("stats %+v, want 6 busy and %d long polls", st, query.DefaultLongPollsPerUser)
	}
}

// TestASubmitterLearnsNothingOfOtherTenants: the ledger's head (counts,
// sequences, chain head) is the auditor's and the operator's; a submitter
// is refused it, and told no sequence of the log in its answers.
func TestASubmitterLearnsNothingOfOtherTenants(t *testing.T) {
	t.Parallel()
	h := startHostile(t)
	var head wire.LedgerInfo
	h.ask(t, h.alice, wire.LedgerSubject("alice", wire.EndpointHead), nil, &head)
	if head.Code != wire.CodeNotPermitted || head != (wire.LedgerInfo{Error: head.Error, Code: head.Code}) {
		t.Errorf("alice's head: %+v, want refused with no figure", head)
	}
	var rec wire.RecordReply
	h.ask(t, h.alice, wire.LedgerSubject("alice", wire.EndpointRecord), wire.RecordRequest{Job: "alices", Fresh: true}, &rec)
	var list wire.ListReply
	h.ask(t, h.alice, wire.LedgerSubject("alice", wire.EndpointList), wire.ListRequest{Fresh: true}, &list)
	var totals wire.TotalsReply
	h.ask(t, h.alice, wire.LedgerSubject("alice", wire.EndpointTotals), wire.TotalsRequest{Fresh: true}, &totals)
	var evs wire.EventsReply
	h.ask(t, h.alice, wire.LedgerSubject("alice", wire.EndpointEvents), wire.EventsRequest{Job: "alices", Fresh: true}, &evs)
	if rec.Record == nil || rec.Applied != 0 || len(list.Records) != 1 || list.Applied != 0 || list.CatchingUp ||
		totals.Applied != 0 || len(evs.Events) != 2 || evs.Applied != 0 {
		t.Errorf("alice's answers tell the log's sequence or miss her job: record %+v, list %+v, totals %+v, events %+v", rec, list, totals, evs)
	}
	// Asked as of a sequence she knows, she is told no more than it.
	h.ask(t, h.alice, wire.LedgerSubject("alice", wire.EndpointRecord), wire.RecordRequest{Job: "alices", MinSeq: 1}, &rec)
	if rec.Applied != 1 {
		t.Errorf("alice's record as of #1: applied %d, want 1", rec.Applied)
	}

	for _, id := range []auth.Identity{querytest.Auditor, querytest.Operator} {
		var info wire.LedgerInfo
		h.ask(t, h.qs.Conn(t, id), wire.LedgerSubject(id.Principal(), wire.EndpointHead), nil, &info)
		if info.Error != "" || info.Records != 2 || info.LastSeq != 4 || info.Applied != 4 || info.Head.Seq != 4 {
			t.Errorf("the %s's head: %+v, want every figure", id.Role, info)
		}
	}
}
