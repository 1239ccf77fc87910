package gate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// NodeConsumers are the consumers node reads (events.NodeConsumers): the
// gate makes them, and no other, for the node.
func NodeConsumers(node string) []events.NodeConsumer { return events.NodeConsumers(node) }

// maxAckPending bounds what a node's consumer may hold out at once: a node
// takes every hold at once, and no node holds more.
const maxAckPending = 10000

// consumerFor is the consumer the gate makes for node of what it asked:
// one of NodeConsumers, on the log, with its filters, acked one by one, and
// pulled: the gate builds the config afresh, taking from what the node
// asked only what a node may choose (how long to wait for its acks, how
// many to hold out, where a new consumer starts, when to redeliver), never
// a deliver subject (a push consumer delivers the log to any subject of
// E31 its creator names), nor anything jetstream.ConsumerConfig gains later.
func consumerFor(node, stream string, asked jetstream.ConsumerConfig) (jetstream.ConsumerConfig, error) {
	if stream != events.Stream {
		return jetstream.ConsumerConfig{}, fmt.Errorf("%w: consumers on %s only", ErrRefused, events.Stream)
	}
	for _, c := range NodeConsumers(node) {
		if asked.Durable != c.Name() {
			continue
		}
		filters := asked.FilterSubjects
		if asked.FilterSubject != "" {
			filters = append([]string{asked.FilterSubject}, filters...)
		}
		switch {
		case !slices.Equal(filters, strings.Fields(c.Topic)):
			return jetstream.ConsumerConfig{}, fmt.Errorf("%w: consumer %s filters on %q, not %v", ErrRefused, asked.Durable, c.Topic, filters)
		case asked.DeliverSubject != "" || asked.DeliverGroup != "":
			return jetstream.ConsumerConfig{}, fmt.Errorf("%w: consumer %s must be pulled from: no deliver subject", ErrRefused, asked.Durable)
		case asked.MaxAckPending <= 0 || asked.MaxAckPending > maxAckPending:
			return jetstream.ConsumerConfig{}, fmt.Errorf("%w: consumer %s: max ack pending %d, from 1 to %d", ErrRefused, asked.Durable, asked.MaxAckPending, maxAckPending)
		}
		cc := jetstream.ConsumerConfig{
			Durable:           asked.Durable,
			AckPolicy:         jetstream.AckExplicitPolicy,
			AckWait:           asked.AckWait,
			MaxDeliver:        asked.MaxDeliver,
			BackOff:           asked.BackOff,
			MaxAckPending:     asked.MaxAckPending,
			DeliverPolicy:     asked.DeliverPolicy,
			OptStartSeq:       asked.OptStartSeq,
			InactiveThreshold: asked.InactiveThreshold,
		}
		if len(filters) == 1 {
			cc.FilterSubject = filters[0]
		} else {
			cc.FilterSubjects = filters
		}
		return cc, nil
	}
	return jetstream.ConsumerConfig{}, fmt.Errorf("%w: %q is no consumer of node %s", ErrRefused, asked.Durable, node)
}
