package bus_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/natstest"
)

// conformanceStream holds the conformance suite's topics, which are not e31
// events.
const conformanceStream = "CONFORMANCE"

func conformanceServer(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv := natstest.Start(t)
	js, err := jetstream.New(srv.Conn(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: conformanceStream, Subjects: []string{"test.>"}, Storage: jetstream.FileStorage,
	})
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func runConformance(t *testing.T, lanes int) {
	js := conformanceServer(t)
	features := tests.Features{
		ConsumerGroups:                      true,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     lanes == 1,
		GuaranteedOrderWithSingleSubscriber: lanes == 1,
		Persistent:                          true,
		NewSubscriberReceivesOldMessages:    true,
		// The full TestConcurrentSubscribe gives 50 consumers 5,000 messages
		// each, 100 s a mode on 2 cores; make test runs watermill's short
		// form, E31_CONFORMANCE_FULL=1 the whole.
		ForceShort: os.Getenv("E31_CONFORMANCE_FULL") == "",
		GenerateTopicFunc: func(tctx tests.TestContext) string {
			return "test." + string(tctx.TestID) + "." + watermill.NewShortUUID()
		},
	}
	newPair := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		pub := bus.NewPublisher(js, "e31/test", nil)
		sub, err := bus.NewSubscriber(js, bus.SubscriberConfig{
			Stream:  conformanceStream,
			Durable: group,
			Lanes:   lanes,
			Key:     func(string) string { return "" },
			AckWait: 2 * time.Second,
			// The suite closes subscribers whose messages nobody will ack.
			Drain:   50 * time.Millisecond,
			Backoff: []time.Duration{10 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub
	}
	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return newPair(t, "c"+watermill.NewShortUUID())
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return newPair(t, group)
		},
	)
}

// TestConformanceOrdered runs watermill's Pub/Sub suite against the adapter
// as RENT and LEDGER use it: one lane, stream order.
func TestConformanceOrdered(t *testing.T) { runConformance(t, 1) }

// TestConformanceConcurrent runs the suite as RUN uses it: every message
// handed over at once.
func TestConformanceConcurrent(t *testing.T) { runConformance(t, 0) }
