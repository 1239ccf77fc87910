package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// Handler binds a HandlerFunc to a topic (subject filters separated by
// spaces) and the subscriber that delivers it.
type Handler struct {
	Name       string
	Topic      string
	Subscriber SubscriberConfig
	Handle     HandlerFunc
	// Undecodable, if set, deals with messages that are not valid events;
	// otherwise they go to the poison stream.
	Undecodable Undecodable
	// Message, if set instead of Handle, takes each message as it is: for
	// streams whose messages are not events (OUTPUT's timers).
	Message message.NoPublishHandlerFunc
}

// Run runs handlers on one Router until ctx ends, then stops taking new
// messages and waits for running handlers (up to the Router's close
// timeout). An Observer in ctx (WithObserver) watches the handlers. It
// returns nil after a clean shutdown, and an error as soon as a handler's
// subscription ends for good (its consumer was deleted and could not be
// made again): a service that silently stops handling one of its topics
// would look alive and do nothing.
func Run(ctx context.Context, js jetstream.JetStream, pub *Publisher, service string, log *slog.Logger, handlers ...Handler) error {
	if log == nil {
		log = slog.Default()
	}
	obs := ObserverFrom(ctx)
	r, err := NewRouter(RouterConfig{Service: service, Logger: log, Publisher: pub, Observer: obs})
	if err != nil {
		return err
	}
	var subs []*Subscriber
	for _, h := range handlers {
		cfg := h.Subscriber
		if cfg.Logger == nil {
			cfg.Logger = log
		}
		sub, err := NewSubscriber(js, cfg)
		if err != nil {
			return fmt.Errorf("%s: handler %s: %w", service, h.Name, err)
		}
		subs = append(subs, sub)
		fn := h.Message
		if fn == nil {
			fn = handle(service, h.Handle, h.Undecodable)
		}
		r.AddConsumerHandler(h.Name, h.Topic, sub, fn)
		if obs != nil {
			obs.Consuming(service, h.Name, sub.cfg.Stream, ConsumerName(sub.cfg.Durable, h.Topic))
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := r.Run(gctx)
		if err == nil && gctx.Err() == nil {
			// The Router stops by itself only once every handler's channel
			// has closed: nothing would be handled any more.
			return errors.New("every handler stopped")
		}
		return err
	})
	for i, s := range subs {
		g.Go(func() error {
			select {
			case <-gctx.Done():
				return nil
			case err := <-s.Failed():
				return fmt.Errorf("handler %s: %w", handlers[i].Name, err)
			}
		})
	}
	err = g.Wait()
	for _, s := range subs {
		err = errors.Join(err, s.Close())
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Shut down while a handler was still subscribing: a clean
		// shutdown all the same.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", service, err)
	}
	return nil
}
