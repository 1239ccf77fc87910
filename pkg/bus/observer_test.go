package bus_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// observed records what a bus.Observer is told.
type observed struct {
	mu        sync.Mutex
	handled   []string // handler: ok, transient or permanent
	poisoned  []string
	consuming []string
	changed   chan struct{}
}

func (o *observed) note(f func()) {
	o.mu.Lock()
	f()
	o.mu.Unlock()
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

func (o *observed) Handled(service, handler string, took time.Duration, err error) {
	what := "ok"
	switch {
	case bus.IsPermanent(err):
		what = "permanent"
	case err != nil:
		what = "transient"
	}
	o.note(func() { o.handled = append(o.handled, service+"/"+handler+": "+what) })
}

func (o *observed) Poisoned(service string) {
	o.note(func() { o.poisoned = append(o.poisoned, service) })
}

func (o *observed) Consuming(service, handler, stream, consumer string) {
	o.note(func() { o.consuming = append(o.consuming, service+"/"+handler+" "+stream+"/"+consumer) })
}

// TestRunTellsTheObserver: every try at a message is told with how it
// ended, a message set aside is told as poisoned, and every consumer a
// handler reads is named.
func TestRunTellsTheObserver(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	pub := bus.NewPublisher(js, "e31/test", nil)
	obs := &observed{changed: make(chan struct{}, 1)}
	topic := events.KindSubject(events.TypeCancelRequested)
	var tries sync.Map
	fn := func(_ context.Context, env events.Envelope) error {
		switch env.Subject {
		case "flaky":
			if n, _ := tries.LoadOrStore("flaky", 1); n == 1 {
				tries.Store("flaky", 2)
				return errors.New("the server blinked")
			}
		case "bad":
			return bus.Permanent(errors.New("never"))
		}
		return nil
	}
	rctx, cancel := context.WithCancel(bus.WithObserver(ctx, obs))
	done := make(chan error, 1)
	go func() {
		done <- bus.Run(rctx, js, pub, "test", slog.New(slog.DiscardHandler),
			bus.Handler{Name: "cancel", Topic: topic, Subscriber: bus.SubscriberConfig{Durable: "obs", Lanes: 1}, Handle: fn})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the router ended with %v, want nothing but the cancel", err)
		}
	})
	for _, job := range []string{"flaky", "bad", "fine"} {
		if _, err := pub.Append(ctx, job, &events.CancelRequested{By: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"test/cancel: transient", "test/cancel: ok", "test/cancel: permanent", "test/cancel: ok"}
	deadline := time.After(15 * time.Second)
	for {
		obs.mu.Lock()
		got, poisoned, consuming := slices.Clone(obs.handled), slices.Clone(obs.poisoned), slices.Clone(obs.consuming)
		obs.mu.Unlock()
		if len(got) >= len(want) && len(poisoned) >= 1 {
			if !slices.Equal(got, want) {
				t.Errorf("handled: %q, want %q", got, want)
			}
			if !slices.Equal(poisoned, []string{"test"}) {
				t.Errorf("poisoned: %q, want [test]", poisoned)
			}
			wantC := "test/cancel " + events.Stream + "/" + bus.ConsumerName("obs", topic)
			if !slices.Equal(consuming, []string{wantC}) {
				t.Errorf("consuming: %q, want [%s]", consuming, wantC)
			}
			return
		}
		select {
		case <-obs.changed:
		case <-deadline:
			t.Fatalf("after 15s: handled %q, poisoned %q", got, poisoned)
		}
	}
}
