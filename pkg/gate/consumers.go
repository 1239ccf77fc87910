package gate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// Consumer is one durable consumer a run node reads: made for it by the
// gate, read by the node by name (its permissions name it, pkg/auth).
type Consumer struct {
	// Handler names what the node does with it.
	Handler string
	// Topic is what it filters on (filters separated by spaces, as
	// bus.SubscriberConfig takes them), Durable the consumer group the
	// node reads it as.
	Topic, Durable string
}

// Name is the consumer's name on the server.
func (c Consumer) Name() string { return bus.ConsumerName(c.Durable, c.Topic) }

// NodeConsumers are the consumers node reads: the holds on it, and every
// cancel (it stops the jobs it runs that are cancelled).
func NodeConsumers(node string) []Consumer {
	durable := "run-" + node
	return []Consumer{
		{Handler: "held", Topic: events.HeldSubject(node), Durable: durable},
		{Handler: "cancel", Topic: events.KindSubject(events.TypeCancelRequested), Durable: durable},
	}
}

// maxAckPending bounds what a node's consumer may hold out at once: a node
// takes every hold at once, and no node holds more.
const maxAckPending = 10000

// checkConsumer reports why cc is no consumer the gate makes for node: one
// of NodeConsumers, on the log, with its filters, acked one by one. It is
// a pull consumer whatever the node asked: jetstream.ConsumerConfig has no
// deliver subject, and the gate sends the server the config it decoded,
// never the node's bytes (a push consumer would deliver the log to any
// subject of E31 its creator named).
func checkConsumer(node, stream string, cc jetstream.ConsumerConfig) error {
	if stream != events.Stream {
		return fmt.Errorf("%w: consumers on %s only", ErrRefused, events.Stream)
	}
	for _, c := range NodeConsumers(node) {
		if cc.Durable != c.Name() {
			continue
		}
		filters := cc.FilterSubjects
		if cc.FilterSubject != "" {
			filters = append([]string{cc.FilterSubject}, filters...)
		}
		switch {
		case !slices.Equal(filters, strings.Fields(c.Topic)):
			return fmt.Errorf("%w: consumer %s filters on %q, not %v", ErrRefused, cc.Durable, c.Topic, filters)
		case cc.Name != "" && cc.Name != cc.Durable:
			return fmt.Errorf("%w: consumer %s named %s", ErrRefused, cc.Durable, cc.Name)
		case cc.AckPolicy != jetstream.AckExplicitPolicy:
			return fmt.Errorf("%w: consumer %s must ack each message", ErrRefused, cc.Durable)
		case cc.MaxAckPending <= 0 || cc.MaxAckPending > maxAckPending:
			return fmt.Errorf("%w: consumer %s: max ack pending %d, from 1 to %d", ErrRefused, cc.Durable, cc.MaxAckPending, maxAckPending)
		case len(cc.Metadata) > 0:
			return fmt.Errorf("%w: consumer %s: no metadata", ErrRefused, cc.Durable)
		}
		return nil
	}
	return fmt.Errorf("%w: %q is no consumer of node %s", ErrRefused, cc.Durable, node)
}
