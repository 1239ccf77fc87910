package rent_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/querytest"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/services/rent"
)

// TestWhyAnswersTheAskersInboxOnly: RENT, running under its own
// credentials, answers no request of a submitter's whose reply subject
// names a lease key, an object store, an event subject, the JetStream API
// or another identity's inbox, and counts each; and it tells a submitter
// nothing of how many jobs wait.
func TestWhyAnswersTheAskersInboxOnly(t *testing.T) {
	t.Parallel()
	qs := querytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pub := bus.NewPublisher(qs.JetStream(t, querytest.Operator), "e31/test", nil)
	for job, who := range map[string]string{"alices": "alice", "bobs": "bob"} {
		spec := events.JobSpec{Name: job, Work: events.Work{Command: []string{"true"}},
			Request: events.Request{CPU: 1, MemoryBytes: 1 << 20, LimitSeconds: 60}}
		for _, ev := range []events.Event{&events.JobRequested{Submitter: who, Spec: spec}, &events.JobSubmitted{Submitter: who, Spec: spec}} {
			if _, err := pub.Append(ctx, job, ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	id := querytest.Service(auth.RentService)
	svc, err := rent.New(qs.Conn(t, id), qs.JetStream(t, id), rent.Config{Source: "e31/rent/test", Instance: id.Name, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() {
		if err := svc.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("rent: %v", err)
		}
	})

	alice := qs.Conn(t, querytest.Submitter("alice"))
	body, _ := json.Marshal(wire.WhyRequest{Job: "alices"})
	subject := wire.RentWhySubject("alice")
	var why wire.WhyReply
	if err := json.Unmarshal(querytest.WaitServed(t, alice, subject, body).Data, &why); err != nil {
		t.Fatal(err)
	}
	if why.Job != "alices" || why.State != hold.StateWaiting || why.Queued != 0 {
		t.Errorf("alice's why: %+v, want her job waiting and no count of the queue", why)
	}
	qs.AssertNothingLands(t, alice, subject, body, func() uint64 { return svc.QueryStats().Refused })

	// The operator is told how many wait.
	m, err := qs.Conn(t, querytest.Operator).RequestWithContext(ctx, wire.RentWhySubject(events.Operator), body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(m.Data, &why); err != nil || why.Queued != 2 {
		t.Errorf("the operator's why: %+v (%v), want 2 queued", why, err)
	}
}
