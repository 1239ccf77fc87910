package bus_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// running is a bus.Run in the background: stop ends it and returns what it
// returned.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func runHandlers(t *testing.T, js jetstream.JetStream, hs ...bus.Handler) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	pub := bus.NewPublisher(js, "e31/test", nil)
	go func() { r.done <- bus.Run(ctx, js, pub, "test", slog.New(slog.DiscardHandler), hs...) }()
	t.Cleanup(func() { _ = r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("bus.Run did not return within 30s of its context ending")
		return nil
	}
}

// handled collects the jobs a handler saw.
func handled() (chan string, bus.HandlerFunc) {
	ch := make(chan string, 100)
	return ch, func(_ context.Context, env events.Envelope) error {
		ch <- env.Subject
		return nil
	}
}

func await(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("%s was not handled within 15s", want)
		}
	}
}

func TestRunMakesADeletedConsumerAgain(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	pub := bus.NewPublisher(js, "e31/test", nil)
	topic := events.KindSubject(events.TypeCancelRequested)
	seen, fn := handled()
	r := runHandlers(t, js, bus.Handler{Name: "cancel", Topic: topic, Subscriber: bus.SubscriberConfig{Durable: "t", Lanes: 4}, Handle: fn})

	if _, err := pub.Append(ctx, "before", &events.CancelRequested{By: "alice"}); err != nil {
		t.Fatal(err)
	}
	await(t, seen, "before")
	// An operator deletes the consumer with the JetStream API.
	if err := js.DeleteConsumer(ctx, events.Stream, bus.ConsumerName("t", topic)); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Append(ctx, "after", &events.CancelRequested{By: "alice"}); err != nil {
		t.Fatal(err)
	}
	await(t, seen, "after")
	if err := r.stop(t); err != nil {
		t.Errorf("Run after a clean shutdown: %v", err)
	}
}

func TestRunEndsWithTheErrorWhenItsConsumerCannotBeMadeAgain(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "GONE", Subjects: []string{"gone.*"}}); err != nil {
		t.Fatal(err)
	}
	r := runHandlers(t, js, bus.Handler{Name: "gone", Topic: "gone.*",
		Subscriber: bus.SubscriberConfig{Durable: "t", Stream: "GONE"},
		Handle:     func(context.Context, events.Envelope) error { return nil }})
	// The consumer is there once the handler runs; then its stream goes,
	// and with it any way to make it again.
	for {
		if _, err := js.Consumer(ctx, "GONE", bus.ConsumerName("t", "gone.*")); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the handler's consumer never appeared")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := js.DeleteStream(ctx, "GONE"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		r.done <- err
		if err == nil {
			t.Fatal("Run returned nil after its consumer's stream was deleted")
		}
		t.Logf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on for 30s without the consumer it needs")
	}
}

func TestRunSetsAsideWhatIsNoEvent(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	pub := bus.NewPublisher(js, "e31/test", nil)
	seen, fn := handled()
	before := bus.SetAside()
	runHandlers(t, js, bus.Handler{Name: "cancel", Topic: events.JobSubjects,
		Subscriber: bus.SubscriberConfig{Durable: "t", Lanes: 1}, Handle: fn})

	n := junk(t, ctx, js, "victim", "mallory", false)
	if _, err := pub.Append(ctx, "victim", &events.CancelRequested{By: "alice"}); err != nil {
		t.Fatal(err)
	}
	// One lane keeps the stream in order: the event after the junk is
	// handled only once every piece of junk was set aside.
	await(t, seen, "victim")
	if got := bus.SetAside() - before; got < uint64(n) {
		t.Errorf("SetAside counted %d, want at least %d", got, n)
	}
	poison, err := js.Stream(ctx, events.PoisonStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := poison.Info(ctx, jetstream.WithSubjectFilter("e31.poison.test"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(n) {
		t.Errorf("the poison stream holds %d messages, want the %d set aside", info.State.Msgs, n)
	}
	m, err := poison.GetLastMsgForSubject(ctx, "e31.poison.test")
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("reason_poisoned") == "" || m.Header.Get(bus.MetaSubject) == "" {
		t.Errorf("a poison message says neither why nor from where: %v", m.Header)
	}
}

// TestRunHandlesWhatComesAfterForgedStatuses: nats.go's consumer takes an
// empty message with a Status header for a status of the server's, never
// hands it over and never acks it, so that a few of them fill a consumer's
// MaxAckPending for good. The Subscriber's own pulls hand them over, and
// they are set aside like any other junk.
func TestRunHandlesWhatComesAfterForgedStatuses(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	pub := bus.NewPublisher(js, "e31/test", nil)
	seen, fn := handled()
	runHandlers(t, js, bus.Handler{Name: "cancel", Topic: events.KindSubject(events.TypeCancelRequested),
		Subscriber: bus.SubscriberConfig{Durable: "t", Lanes: 1, MaxAckPending: 4}, Handle: fn})

	for _, status := range []string{"100", "100", "404", "408", "409", "409", "503", "100"} {
		m := nats.NewMsg("e31.job.victim.cancel.mallory")
		m.Header.Set("Status", status)
		m.Header.Set("Description", "Consumer Deleted")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pub.Append(ctx, "victim", &events.CancelRequested{By: "alice"}); err != nil {
		t.Fatal(err)
	}
	await(t, seen, "victim")
}
