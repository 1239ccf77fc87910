package submit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// garbage is what a tenant may publish on its own tail of another tenant's
// job: junk, a well-formed event of a type that does not belong there, and
// a second well-formed request.
func garbage(t *testing.T, f *fixture, job, who string) {
	t.Helper()
	publish := func(subject string, body []byte, h nats.Header) {
		m := nats.NewMsg(subject)
		m.Data = body
		for k, vs := range h {
			m.Header[k] = vs
		}
		if _, err := f.js.PublishMsg(f.ctx, m); err != nil {
			t.Fatalf("publish on %s: %v", subject, err)
		}
	}
	publish("e31.job."+job+".requested."+who, []byte("{not json"), nil)
	publish("e31.job."+job+".cancel."+who, []byte("junk"), nil)
	publish("e31.job."+job+".delete."+who, []byte(`{"what":"all"}`), nats.Header{"ce-type": {events.TypeDeleteRequested}})
	rej, err := events.New(job, &events.JobRejected{Reason: "mallory says so"}, who, time.Now()).Msg()
	if err != nil {
		t.Fatal(err)
	}
	publish("e31.job."+job+".requested."+who, rej.Data, rej.Header)
	second := events.New(job, &events.JobRequested{Submitter: who, Spec: validSpec()}, who, time.Now())
	second.ID += "-mine"
	if _, err := f.pub.AppendEnvelope(f.ctx, second); err != nil {
		t.Fatal(err)
	}
}

// TestAnotherTenantsGarbageChangesNothing: garbage on a job's subjects,
// before SUBMIT decides and after, neither rejects, alters nor freezes it;
// only its first request counts. Garbage under an id nobody requested is
// the publisher's own job, and is refused as such.
func TestAnotherTenantsGarbageChangesNothing(t *testing.T) {
	// Registered first, checked last: once the server and the connections
	// are gone, nothing Run started may still be running.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction(natstest.LeftBySourcing)) })
	f := start(t)
	// Before the request, on the job's other subjects: no request.
	if _, err := f.js.Publish(f.ctx, "e31.job.early.cancel.mallory", []byte("junk")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.Append(f.ctx, "early", &events.JobRequested{Submitter: "alice", Spec: validSpec()}); err != nil {
		t.Fatal(err)
	}
	victim := f.request(t, "victim", "alice", validSpec())
	garbage(t, f, "victim", "mallory")
	if _, err := f.js.Publish(f.ctx, "e31.job.mine.requested.mallory", []byte("{not json")); err != nil {
		t.Fatal(err)
	}

	decided := f.decisions(t)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- f.submit.Run(ctx) }()

	want := map[string]string{"victim": "submitted", "early": "submitted", "mine": "rejected"}
	for range want {
		select {
		case m := <-decided:
			s, err := events.ParseSubject(m.Subject())
			if err != nil {
				t.Fatal(err)
			}
			job, kind := s.Job, s.Kind
			if want[job] != kind {
				t.Errorf("%s: %s, want %s", job, kind, want[job])
			}
		case <-time.After(10 * time.Second):
			t.Fatal("SUBMIT did not decide every request within 10s")
		}
	}
	// Garbage after the decision changes nothing either.
	garbage(t, f, "victim", "mallory")
	later, err := bus.ReadHistory(f.ctx, f.js, "victim", victim.Seq+1)
	if err != nil {
		t.Fatal(err)
	}
	decisions := 0
	for _, e := range later.Events {
		switch e.Event.(type) {
		case *events.JobSubmitted, *events.JobRejected:
			decisions++
		}
	}
	if decisions != 1 {
		t.Errorf("victim has %d decisions, want 1: %v", decisions, later.Events)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}

// decisions delivers every JobSubmitted and JobRejected stored from now on.
func (f *fixture) decisions(t *testing.T) <-chan jetstream.Msg {
	t.Helper()
	// Read from the stream, not the subjects: a core subscriber also sees
	// an append the stream refused (another event came first), which
	// SUBMIT then makes again.
	stream, err := f.js.Stream(f.ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	c, err := stream.OrderedConsumer(f.ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.KindSubject(events.TypeJobSubmitted), events.KindSubject(events.TypeJobRejected)},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan jetstream.Msg, 64)
	cc, err := c.Consume(func(m jetstream.Msg) { ch <- m })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return ch
}
