package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query/wire"
)

// JobEvents asks the ledger for a job's events from sequence after on, as
// stored. With wait, a request that finds nothing new waits that long for
// the job's next event; with fresh, the ledger first reads everything
// logged so far. It is how anyone, a submitter included, reads one job's
// events: the ledger checks that the job is the asker's.
func (c *Client) JobEvents(ctx context.Context, job string, after uint64, wait time.Duration, fresh bool) (wire.EventsReply, error) {
	var reply wire.EventsReply
	q := wire.EventsRequest{Job: job, After: after, Wait: wait, Fresh: fresh}
	if err := c.request(ctx, c.ledger(wire.EndpointEvents), q, &reply, wire.WaitOf(wait)+10*time.Second); err != nil {
		return reply, err
	}
	if reply.Code == wire.CodeNoSuchJob {
		return reply, fmt.Errorf("%w: %s", ErrNoSuchJob, job)
	}
	if reply.Error != "" {
		return reply, errors.New(reply.Error)
	}
	return reply, nil
}

// FollowJob calls fn with each of a job's events, from the first, until fn
// returns false or ctx ends; with untilOver, also once the job is over and
// its events are read.
func (c *Client) FollowJob(ctx context.Context, job string, untilOver bool, fn func(wire.StoredEvent) bool) error {
	var after uint64
	fresh := true
	for {
		reply, err := c.JobEvents(ctx, job, after, 30*time.Second, fresh)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		fresh = false
		for _, e := range reply.Events {
			after = e.Seq
			if !fn(e) {
				return nil
			}
		}
		if untilOver && reply.Over && !reply.More {
			return nil
		}
	}
}

// Events calls fn with each of a job's events logged so far, asked of the
// ledger; with follow, also with those to come, until the job is over. It
// stops at fn's first error and returns it.
func (c *Client) Events(ctx context.Context, job string, follow bool, fn func(wire.StoredEvent) error) error {
	if err := validJob(job); err != nil {
		return err
	}
	var ferr error
	if follow {
		err := c.FollowJob(ctx, job, true, func(e wire.StoredEvent) bool {
			ferr = fn(e)
			return ferr == nil
		})
		return errors.Join(err, ferr)
	}
	var after uint64
	fresh := true
	for {
		reply, err := c.JobEvents(ctx, job, after, 0, fresh)
		if err != nil {
			return err
		}
		fresh = false
		for _, e := range reply.Events {
			if err := fn(e); err != nil {
				return err
			}
			after = e.Seq
		}
		if !reply.More {
			return nil
		}
	}
}

// Scan calls fn with every stored message matching filters (every message
// with none), in log order, up to the end of the log as of the call or,
// with follow, for ever. It reads the log itself: only the auditor and the
// operator may (ErrNotPermitted for others).
func (c *Client) Scan(ctx context.Context, filters []string, follow bool, fn func(wire.StoredEvent) error) error {
	if err := c.NeedLog("reading the whole log"); err != nil {
		return err
	}
	// Not nats.go's ordered consumer: one empty message with a Status
	// header, which any tenant may store, stops it for ever (see
	// bus.Follower).
	f, err := bus.Follow(ctx, c.js, filters, 1)
	if err != nil {
		return fmt.Errorf("read the log: %w", err)
	}
	defer f.Stop()
	if f.Pending() == 0 && !follow {
		return nil
	}
	for {
		m, pending, err := f.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read the log: %w", err)
		}
		if err := fn(wire.NewStoredEvent(m.Sequence, m.Subject, m.Header, m.Data, m.Time)); err != nil {
			return err
		}
		if !follow && pending == 0 {
			return nil
		}
	}
}

// Follow calls fn with each decodable event on filter, from the first,
// until fn returns false or ctx ends, reading the log itself: for the
// auditor and the operator.
func (c *Client) Follow(ctx context.Context, filter string, fn func(events.Envelope) bool) error {
	f, err := bus.Follow(ctx, c.js, []string{filter}, 1)
	if err != nil {
		return fmt.Errorf("follow %s: %w", filter, err)
	}
	defer f.Stop()
	for {
		m, _, err := f.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("follow %s: %w", filter, err)
		}
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			continue
		}
		env.Seq = m.Sequence
		if !fn(env) {
			return nil
		}
	}
}

// Decode decodes a stored event, with its sequence.
func Decode(m wire.StoredEvent) (events.Envelope, error) {
	env, err := events.Decode(m.Subject, nats.Header(m.Headers), storedBody(m))
	env.Seq = m.Seq
	return env, err
}

// storedBody is the exact body of a stored event.
func storedBody(m wire.StoredEvent) []byte {
	if m.BodyBase64 != "" {
		if b, err := base64.StdEncoding.DecodeString(m.BodyBase64); err == nil {
			return b
		}
	}
	return m.Body
}
