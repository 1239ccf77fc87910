package trace

import (
	"context"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// TestTheContextRidesInTheEventsHeaders checks that a trace context put
// on an event comes back from its NATS headers, as ce-traceparent and
// ce-tracestate, and that what is not a W3C traceparent starts nothing.
func TestTheContextRidesInTheEventsHeaders(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := FromEnvironment(context.Background(), func(k string) string {
		return map[string]string{"TRACEPARENT": parent, "TRACESTATE": "e31=1"}[k]
	})
	tc := Of(ctx)
	if tc.Parent != parent || tc.State != "e31=1" {
		t.Fatalf("Of(FromEnvironment) = %+v, want %s with its state", tc, parent)
	}
	env := events.New("job-1", &events.JobRequested{Submitter: "alice"}, "e31/test", time.Unix(0, 0))
	env.Trace = tc
	m, err := env.Msg()
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(events.HeaderTraceParent); got != parent {
		t.Errorf("%s = %q, want %q", events.HeaderTraceParent, got, parent)
	}
	back, err := events.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if back.Trace != tc {
		t.Errorf("decoded trace %+v, want %+v", back.Trace, tc)
	}
	untraced, err := events.New("job-1", &events.JobRequested{Submitter: "alice"}, "e31/test", time.Unix(0, 0)).Msg()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := untraced.Header[events.HeaderTraceParent]; ok {
		t.Errorf("an untraced event has a %s header", events.HeaderTraceParent)
	}
	for _, bad := range []string{"junk", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		if got := Of(Context(context.Background(), events.Trace{Parent: bad})); got != (events.Trace{}) {
			t.Errorf("traceparent %q gave %+v, want none", bad, got)
		}
	}
}
