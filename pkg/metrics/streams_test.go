package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/natstest"
)

func TestStreamCollectorReportsLagAndPoison(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	// A service's durable consumer that has read nothing yet, beside an
	// ordered consumer, which is no service's backlog.
	if _, err := js.CreateOrUpdateConsumer(ctx, events.Stream, jetstream.ConsumerConfig{
		Durable: "release_e31-job-any-returned", FilterSubject: events.KindSubject(events.TypeOutputReturned), AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{}); err != nil {
		t.Fatal(err)
	}
	appendLife(t, ctx, js, "j", "alice", 3, events.Succeeded)
	if _, err := js.Publish(ctx, "e31.poison.submit", []byte("{}")); err != nil {
		t.Fatal(err)
	}

	c := metrics.NewStreamCollector(js)
	want := `
# HELP e31_consumer_ack_pending Events delivered to a service's durable consumer and not yet acknowledged: what it is working on.
# TYPE e31_consumer_ack_pending gauge
e31_consumer_ack_pending{consumer="release_e31-job-any-returned",service="release"} 0
# HELP e31_consumer_pending Events of the log not yet delivered to a service's durable consumer: the lag to scale the service on.
# TYPE e31_consumer_pending gauge
e31_consumer_pending{consumer="release_e31-job-any-returned",service="release"} 3
# HELP e31_poison_messages Events a service could never handle, kept in the poison stream (for 30 days) with the reason.
# TYPE e31_poison_messages gauge
e31_poison_messages{service="submit"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestServiceOf(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"submit_e31-job-any-requested-any":   "submit",
		"rent-rent-1_e31-job-all":            "rent",
		"run-node-1_e31-job-any-held-node-1": "run",
		"release":                            "release",
	} {
		if got := metrics.ServiceOf(name); got != want {
			t.Errorf("ServiceOf(%q) = %q, want %q", name, got, want)
		}
	}
}
