package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
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
}

// Run runs handlers on one Router until ctx ends, then stops taking new
// messages and waits for running handlers (up to the Router's close
// timeout). It returns nil after a clean shutdown.
func Run(ctx context.Context, js jetstream.JetStream, pub *Publisher, service string, log *slog.Logger, handlers ...Handler) error {
	if log == nil {
		log = slog.Default()
	}
	r, err := NewRouter(RouterConfig{Service: service, Logger: log, Publisher: pub})
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
		r.AddConsumerHandler(h.Name, h.Topic, sub, message.NoPublishHandlerFunc(Handle(h.Handle, h.Undecodable)))
	}
	err = r.Run(ctx)
	for _, s := range subs {
		err = errors.Join(err, s.Close())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", service, err)
	}
	return nil
}
