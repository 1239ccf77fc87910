package rent_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/rent"
)

// quiet keeps the services' logs out of the test output.
var quiet = slog.New(slog.DiscardHandler)

// fixture is one test's server, a publisher standing for the other steps,
// and a RENT service, leading, whose handler the test calls directly.
type fixture struct {
	ctx    context.Context
	js     jetstream.JetStream
	pub    *bus.Publisher
	rent   *rent.Service
	resign func() // gives up rent's leadership
}

func start(t *testing.T) *fixture {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 15*time.Second)
	svc, err := rent.New(srv.Conn(t), js, rent.Config{Source: "e31/rent/test", Instance: "rent-1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/test", nil), rent: svc}
	f.resign = svc.Lead(t, ctx)
	return f
}

// append logs an event as another step would.
func (f *fixture) append(t *testing.T, s step) events.Envelope {
	t.Helper()
	env, err := f.pub.Append(f.ctx, s.subject, s.ev)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// handle delivers env to RENT's handler and makes the scheduling pass the
// handler wakes the scheduler for.
func (f *fixture) handle(t *testing.T, svc *rent.Service, env events.Envelope) {
	t.Helper()
	if err := svc.Handle(f.ctx, env); err != nil {
		t.Fatalf("Handle(%s): %v", env, err)
	}
	if err := svc.Schedule(f.ctx); err != nil {
		t.Fatalf("scheduling after %s: %v", env, err)
	}
}

// holds returns the job's ComputeHeld events, as logged.
func (f *fixture) holds(t *testing.T, job string) []*events.ComputeHeld {
	t.Helper()
	evs, err := bus.ReadJob(f.ctx, f.js, job, 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []*events.ComputeHeld
	for _, e := range evs {
		if h, ok := e.Event.(*events.ComputeHeld); ok {
			out = append(out, h)
		}
	}
	return out
}

func TestHandleHoldsOnceWhenASubmissionIsDeliveredTwice(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.handle(t, f.rent, f.append(t, announce("n1", 2)))
	sub := f.append(t, submit("job-1", 1))
	f.handle(t, f.rent, sub)
	f.handle(t, f.rent, sub)

	holds := f.holds(t, "job-1")
	if len(holds) != 1 {
		t.Fatalf("job-1 was held %d times, want once", len(holds))
	}
	if h := holds[0]; h.Node != "n1" || h.Attempt != 1 || h.CPU != 1 || h.Submitter != "alice" {
		t.Errorf("hold = %+v, want attempt 1 of 1 cpu on n1 for alice", h.Hold)
	}
}

// TestHandleOfAFreshServiceCannotHoldTwice: a RENT that took over and has
// not seen the hold (here: one that never replayed the log) decides to hold
// again, and the log refuses it because the job moved on.
func TestHandleOfAFreshServiceCannotHoldTwice(t *testing.T) {
	t.Parallel()
	f := start(t)
	node := f.append(t, announce("n1", 2))
	sub := f.append(t, submit("job-1", 1))
	f.handle(t, f.rent, node)
	f.handle(t, f.rent, sub)

	// It takes over as the leader.
	f.resign()
	again, err := rent.New(nil, f.js, rent.Config{Instance: "rent-2", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	again.Lead(t, f.ctx)
	f.handle(t, again, node)
	f.handle(t, again, sub)
	if holds := f.holds(t, "job-1"); len(holds) != 1 {
		t.Fatalf("job-1 was held %d times, want once", len(holds))
	}
}

func TestHandleCancelsAWaitingJobOnce(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.handle(t, f.rent, f.append(t, submit("job-1", 1))) // no node: it waits
	c := f.append(t, cancel("job-1"))
	f.handle(t, f.rent, c)
	f.handle(t, f.rent, c)
	f.handle(t, f.rent, f.append(t, announce("n1", 2)))

	evs, err := bus.ReadJob(f.ctx, f.js, "job-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range evs {
		names = append(names, events.Name(e.Type))
	}
	want := []string{"JobSubmitted", "CancelRequested", "JobCancelled"}
	if !slices.Equal(names, want) {
		t.Errorf("job-1's log = %v, want %v", names, want)
	}
}

// TestHandleFreesCapacityFromAnEventLoggedBeforeItsOwnHold is the service's
// side of TestPoolFreesCapacityFromAnOlderEventAppliedLate, on a real log:
// the release of a is stored before RENT's hold of b, but reaches the
// handler after it. (The service once skipped every event at or below the
// pool's last applied sequence.)
func TestHandleFreesCapacityFromAnEventLoggedBeforeItsOwnHold(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.handle(t, f.rent, f.append(t, announce("n1", 1)))
	f.handle(t, f.rent, f.append(t, announce("n2", 1)))
	f.handle(t, f.rent, f.append(t, submit("a", 1)))
	ha := f.holds(t, "a")
	if len(ha) != 1 {
		t.Fatalf("a was held %d times, want once", len(ha))
	}
	subB := f.append(t, submit("b", 1))
	rel := f.append(t, release("a", 1, ha[0].Node, 1, true))
	f.handle(t, f.rent, subB) // holds b on the other node, after rel in the log
	hb := f.holds(t, "b")
	if len(hb) != 1 || hb[0].Node == ha[0].Node {
		t.Fatalf("b's holds = %+v, want one on the node a does not hold", hb)
	}
	subC := f.append(t, submit("c", 1))
	f.handle(t, f.rent, rel)
	f.handle(t, f.rent, subC)

	hc := f.holds(t, "c")
	if len(hc) != 1 || hc[0].Node != ha[0].Node {
		t.Fatalf("c's holds = %+v, want one on %s, which a's release freed", hc, ha[0].Node)
	}
}

// TestRunHoldsOnceWhenASubmissionIsDeliveredAgain runs the service as it is
// deployed, its consumer and scheduler included, and hands its handler the
// submission a second time, as a redelivery would.
func TestRunHoldsOnceWhenASubmissionIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 15*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	svc := runRent(t, srv, js, "").svc

	for _, s := range []step{announce("n1", 4), submit("job-1", 1)} {
		env, err := pub.Append(ctx, s.subject, s.ev)
		if err != nil {
			t.Fatal(err)
		}
		if s.subject == "job-1" {
			if err := svc.Handle(ctx, env); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, ctx, js, "job-1", events.TypeComputeHeld)
	// A later job's hold is decided in a later pass than anything the
	// repeated delivery could have caused: once it is logged, job-1's log
	// is final.
	if _, err := pub.Append(ctx, "job-2", submit("job-2", 1).ev); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, js, "job-2", events.TypeComputeHeld)
	evs, err := bus.ReadJob(ctx, js, "job-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Errorf("job-1's log has %d events, want JobSubmitted and one ComputeHeld: %v", len(evs), evs)
	}
}

// appender appends steps as the other steps' services would, each with
// the next sequence of js's log, and returns what it stored.
func appender(t *testing.T, ctx context.Context, js jetstream.JetStream) func(step) events.Envelope {
	pub := bus.NewPublisher(js, "e31/test", nil)
	return func(s step) events.Envelope {
		t.Helper()
		env, err := pub.Append(ctx, s.subject, s.ev)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
}

// waitFor returns the job's first event of type ceType, waiting for it to be
// logged until ctx ends.
func waitFor(t *testing.T, ctx context.Context, js jetstream.JetStream, job, ceType string) events.Envelope {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.JobSubject(job)}})
	if err != nil {
		t.Fatal(err)
	}
	iter, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer iter.Stop()
	defer context.AfterFunc(ctx, iter.Stop)()
	for {
		m, err := iter.Next()
		if err != nil {
			t.Fatalf("waiting for %s of %s: %v (%v)", events.Name(ceType), job, err, ctx.Err())
		}
		env, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err == nil && env.Type == ceType {
			return env
		}
	}
}

// TestRentHoldsAJobAfterMessagesItDoesNotApply: what anyone allowed to
// publish on a job's subjects may store there (no event at all, a body
// that is not its type's, an event RENT does nothing with) moves the job's
// last sequence, which every hold is appended against. RENT counts it, and
// holds the job once there is room.
func TestRentHoldsAJobAfterMessagesItDoesNotApply(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 20*time.Second)
	runRent(t, srv, js, "")
	appendStep := appender(t, ctx, js)

	// The one node is full: the job waits.
	appendStep(announce("n1", 1))
	appendStep(submit("first", 1))
	held := waitFor(t, ctx, js, "first", events.TypeComputeHeld).Event.(*events.ComputeHeld)
	appendStep(submit("job", 1))
	appendStep(step{"job", &events.DeleteRequested{What: events.WhatOutput, By: "alice"}})
	junk := []*nats.Msg{
		{Subject: "e31.job.job.requested.mallory", Data: []byte("not an event")},
		{Subject: "e31.job.job.cancel.mallory", Header: nats.Header{events.HeaderType: {events.TypeJobRequested}}, Data: []byte("{")},
	}
	for _, m := range junk {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	appendStep(release("first", held.Attempt, "n1", 1, true))
	if h := waitFor(t, ctx, js, "job", events.TypeComputeHeld).Event.(*events.ComputeHeld); h.Node != "n1" {
		t.Errorf("job held on %s, want n1", h.Node)
	}
}

// TestAHoldOvertakenByJunkIsDecidedAgainOnceTheJunkIsRead: a tenant's junk
// stored on a job's subjects after RENT last read them makes the hold it
// decides conflict. Reading the junk must wake the scheduler, which holds
// the job then; nothing else may ever come to wake it.
func TestAHoldOvertakenByJunkIsDecidedAgainOnceTheJunkIsRead(t *testing.T) {
	t.Parallel()
	f := start(t)
	f.handle(t, f.rent, f.append(t, announce("n1", 1)))
	f.handle(t, f.rent, f.append(t, submit("first", 1)))
	first := f.holds(t, "first")
	if len(first) != 1 {
		t.Fatalf("first held %d times, want once", len(first))
	}
	f.handle(t, f.rent, f.append(t, submit("job", 1)))
	ack, err := f.js.Publish(f.ctx, "e31.job.job.requested.mallory", []byte("not an event"))
	if err != nil {
		t.Fatal(err)
	}
	f.handle(t, f.rent, f.append(t, release("first", first[0].Attempt, "n1", 1, true)))
	if h := f.holds(t, "job"); len(h) != 0 {
		t.Fatalf("job held over junk RENT had not read: %+v", h[0].Hold)
	}

	stream, err := f.js.Stream(f.ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	junk, err := stream.GetMsg(f.ctx, ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	woke, err := f.rent.Follow(f.ctx, junk)
	if err != nil {
		t.Fatal(err)
	}
	if !woke {
		t.Fatal("reading the junk did not wake the scheduler: the job waits for some other event to be held")
	}
	if err := f.rent.Schedule(f.ctx); err != nil {
		t.Fatal(err)
	}
	if h := f.holds(t, "job"); len(h) != 1 || h[0].Node != "n1" {
		t.Fatalf("job after the junk was read: %d holds, want one on n1", len(h))
	}
}
