package main

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query/wire"
)

func natsHeader(h map[string][]string) nats.Header { return nats.Header(h) }

// scan calls fn with every stored message matching filters, in log order,
// up to the end of the log as of the call or, with follow, for ever.
func (c *client) scan(ctx context.Context, filters []string, follow bool, fn func(wire.StoredEvent) error) error {
	cons, err := c.js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	if err != nil {
		return troubleErr(fmt.Errorf("read the log: %w", err))
	}
	pending := cons.CachedInfo().NumPending
	if pending == 0 && !follow {
		return nil
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return troubleErr(fmt.Errorf("read the log: %w", err))
	}
	defer iter.Stop()
	stop := context.AfterFunc(ctx, iter.Stop)
	defer stop()
	for read := uint64(0); follow || read < pending; read++ {
		m, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return troubleErr(fmt.Errorf("read the log: %w", err))
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if err := fn(wire.NewStoredEvent(md.Sequence.Stream, m.Subject(), m.Headers(), m.Data())); err != nil {
			return err
		}
		if !follow && md.NumPending == 0 {
			return nil
		}
	}
	return nil
}
