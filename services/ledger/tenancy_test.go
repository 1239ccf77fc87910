package ledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
)

// tenants is a ledger over a log with one job of alice's and one of bob's.
// The server here is open: what is tested is what the ledger answers to
// the user a subject names (the server binds that name to who may publish
// there, which cmd/e31 tests with authentication on).
type tenants struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *bus.Publisher
	ctx context.Context
}

func startTenants(t *testing.T) *tenants {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 30*time.Second)
	tn := &tenants{nc: nc, js: js, pub: bus.NewPublisher(js, "e31/test", nil), ctx: ctx}
	for job, who := range map[string]string{"alices": "alice", "bobs": "bob"} {
		tn.append(t, job, &events.JobRequested{Submitter: who, Spec: specOf(job)})
		tn.append(t, job, &events.JobSubmitted{Submitter: who, Spec: specOf(job)})
	}
	svc := runLedger(t, ctx, nc, js)
	<-svc.CaughtUp()
	return tn
}

func (tn *tenants) append(t *testing.T, job string, ev events.Event) events.Envelope {
	t.Helper()
	env, err := tn.pub.Append(tn.ctx, job, ev)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// ask asks the ledger's endpoint as user.
func (tn *tenants) ask(t *testing.T, user, endpoint string, q, reply any) {
	t.Helper()
	ask(t, tn.nc, wire.LedgerSubject(user, endpoint), q, reply)
}

func TestASubmitterIsToldAboutItsOwnJobsOnly(t *testing.T) {
	t.Parallel()
	tn := startTenants(t)

	var mine, bobs, none wire.RecordReply
	tn.ask(t, "alice", wire.EndpointRecord, wire.RecordRequest{Job: "alices", Fresh: true}, &mine)
	tn.ask(t, "alice", wire.EndpointRecord, wire.RecordRequest{Job: "bobs", Fresh: true}, &bobs)
	tn.ask(t, "alice", wire.EndpointRecord, wire.RecordRequest{Job: "nope", Fresh: true}, &none)
	if mine.Record == nil || mine.Record.Submitter != "alice" {
		t.Errorf("alice's own record: %+v", mine)
	}
	// Bob's job is exactly as absent as one that does not exist.
	if bobs.Record != nil || bobs.Error != "no such job: bobs" || none.Error != "no such job: nope" {
		t.Errorf("alice asking for bob's job: %+v; for no job: %+v", bobs, none)
	}

	var list wire.ListReply
	tn.ask(t, "alice", wire.EndpointList, wire.ListRequest{Fresh: true}, &list)
	if len(list.Records) != 1 || list.Records[0].Job != "alices" {
		t.Errorf("alice's list: %+v, want her job alone", list.Records)
	}
	tn.ask(t, "alice", wire.EndpointList, wire.ListRequest{Submitter: "bob"}, &list)
	if list.Error == "" || len(list.Records) != 0 {
		t.Errorf("alice listing bob's records: %+v, want refused", list)
	}
	var totals wire.TotalsReply
	tn.ask(t, "alice", wire.EndpointTotals, wire.TotalsRequest{Fresh: true}, &totals)
	for _, s := range totals.Submitters {
		if s.Submitter != "alice" {
			t.Errorf("alice's totals show %s", s.Submitter)
		}
	}
	var evs wire.EventsReply
	tn.ask(t, "alice", wire.EndpointEvents, wire.EventsRequest{Job: "bobs", Fresh: true}, &evs)
	if len(evs.Events) != 0 || evs.Error != "no such job: bobs" {
		t.Errorf("alice asking for bob's events: %+v", evs)
	}
	tn.ask(t, "alice", wire.EndpointEvents, wire.EventsRequest{Job: "alices", Fresh: true}, &evs)
	if len(evs.Events) != 2 || evs.Events[0].Subject != events.RequestSubject("alices", "alice") || evs.Over {
		t.Errorf("alice's events: %+v", evs)
	}

	// The auditor and the operator see everything.
	for _, user := range []string{auth.AuditorName, events.Operator} {
		tn.ask(t, user, wire.EndpointRecord, wire.RecordRequest{Job: "bobs", Fresh: true}, &bobs)
		tn.ask(t, user, wire.EndpointList, wire.ListRequest{Fresh: true}, &list)
		if bobs.Record == nil || len(list.Records) != 2 {
			t.Errorf("%s: bob's record %+v, %d records; want everything", user, bobs, len(list.Records))
		}
	}
}

// TestALaterRequestOnSomeoneElsesJobChangesNothing: bob may publish a
// request on any job id under his own name. On alice's job it changes
// neither whose the job is nor what it asked.
func TestALaterRequestOnSomeoneElsesJobChangesNothing(t *testing.T) {
	t.Parallel()
	tn := startTenants(t)
	forged := events.New("alices", &events.JobRequested{Submitter: "bob", Spec: specOf("forged")}, "bob", time.Now())
	forged.ID = "alices/requested-again" // not a repeat: another id
	m, err := forged.Msg()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.js.PublishMsg(tn.ctx, m); err != nil {
		t.Fatal(err)
	}
	var rep wire.RecordReply
	tn.ask(t, "bob", wire.EndpointRecord, wire.RecordRequest{Job: "alices", Fresh: true}, &rep)
	if rep.Record != nil {
		t.Errorf("bob reads alice's job after requesting it again: %+v", rep.Record)
	}
	tn.ask(t, "alice", wire.EndpointRecord, wire.RecordRequest{Job: "alices", Fresh: true}, &rep)
	if rep.Record == nil || rep.Record.Submitter != "alice" || rep.Record.Name != "alices" {
		t.Errorf("alice's record after bob's request: %+v", rep)
	}
}

// TestAnUnreadableRequestIsStillItsSubmitters: whose a job is comes from the
// subject, which the server vouches for, even when the body cannot be read.
func TestAnUnreadableRequestIsStillItsSubmitters(t *testing.T) {
	t.Parallel()
	tn := startTenants(t)
	env := events.New("garbled", &events.JobRequested{Submitter: "alice"}, "alice", time.Now())
	m, err := env.Msg()
	if err != nil {
		t.Fatal(err)
	}
	m.Data = []byte(`{"submitter":"alice","spec":{"colour":"blue"}}`)
	if _, err := tn.js.PublishMsg(tn.ctx, m); err != nil {
		t.Fatal(err)
	}
	var rep wire.RecordReply
	tn.ask(t, "alice", wire.EndpointRecord, wire.RecordRequest{Job: "garbled", Fresh: true}, &rep)
	if !strings.Contains(rep.Error, "no record yet") {
		t.Errorf("alice's unreadable request: %+v, want no record yet", rep)
	}
	tn.append(t, "garbled", &events.JobRejected{Reason: "unknown field colour"})
	tn.ask(t, "alice", wire.EndpointRecord, wire.RecordRequest{Job: "garbled", Fresh: true}, &rep)
	if rep.Record == nil || rep.Record.State != hold.StateRejected {
		t.Errorf("alice's rejected job: %+v", rep)
	}
	tn.ask(t, "bob", wire.EndpointRecord, wire.RecordRequest{Job: "garbled", Fresh: true}, &rep)
	if rep.Error != "no such job: garbled" {
		t.Errorf("bob asking for alice's rejected job: %+v", rep)
	}
}

// TestWaitingIsALongPoll: a record request with UntilOver is answered when
// the job ends, not before; so are the events of a followed job.
func TestWaitingIsALongPoll(t *testing.T) {
	t.Parallel()
	tn := startTenants(t)
	got := make(chan wire.RecordReply, 1)
	go func() {
		var rep wire.RecordReply
		b, _ := json.Marshal(wire.RecordRequest{Job: "alices", Fresh: true, UntilOver: true, Wait: 20 * time.Second})
		ctx, cancel := context.WithTimeout(tn.ctx, 25*time.Second)
		defer cancel()
		m, err := query.Ask(ctx, tn.nc, wire.LedgerSubject("alice", wire.EndpointRecord), b)
		if err == nil {
			_ = json.Unmarshal(m.Data, &rep)
		}
		got <- rep
	}()
	var evs wire.EventsReply
	tn.ask(t, "alice", wire.EndpointEvents, wire.EventsRequest{Job: "alices", Fresh: true}, &evs)
	after := evs.Events[len(evs.Events)-1].Seq
	select {
	case rep := <-got:
		t.Fatalf("answered before the job ended: %+v", rep)
	case <-time.After(200 * time.Millisecond):
	}
	follow := make(chan wire.EventsReply, 1)
	go func() {
		var rep wire.EventsReply
		b, _ := json.Marshal(wire.EventsRequest{Job: "alices", After: after, Wait: 20 * time.Second})
		ctx, cancel := context.WithTimeout(tn.ctx, 25*time.Second)
		defer cancel()
		if m, err := query.Ask(ctx, tn.nc, wire.LedgerSubject("alice", wire.EndpointEvents), b); err == nil {
			_ = json.Unmarshal(m.Data, &rep)
		}
		follow <- rep
	}()
	ended := tn.append(t, "alices", &events.JobCancelled{Reason: "test"})
	select {
	case rep := <-got:
		// A submitter is not told how far the ledger has read: its
		// record's last event says it has read the end.
		if rep.Record == nil || !rep.Record.Over() || rep.Record.Events[len(rep.Record.Events)-1].Seq != ended.Seq || rep.Applied != 0 {
			t.Errorf("long poll answered %+v", rep)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no answer after the job ended")
	}
	select {
	case rep := <-follow:
		if len(rep.Events) != 1 || rep.Events[0].Seq != ended.Seq || !rep.Over {
			t.Errorf("followed events: %+v, want the cancellation, over", rep)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no events after the job ended")
	}
}
