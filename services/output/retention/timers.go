package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// Timers are scheduled messages in events.TimerStream (ADR-51): stored
// under events.TimerSubject(kind, job, false), the server publishes each at
// its time on events.TimerSubject(kind, job, true), where a durable
// consumer shared by every OUTPUT instance takes it. A new timer of the
// same kind for the same job replaces the old one, so setting a timer twice
// changes nothing. Nothing polls: between timers OUTPUT does no retention
// work at all.

// timerTopic is what OUTPUT's timer consumer takes.
var timerTopic = strings.Join([]string{
	events.TimerSubject(timerExpire, "*", true),
	events.TimerSubject(timerDelete, "*", true),
	events.TimerSubject(timerSweep, "*", true),
}, " ")

// timerBody is the body of a timer, for people reading the stream; the
// subject says everything OUTPUT needs.
type timerBody struct {
	Kind string    `json:"kind"`
	Job  string    `json:"job"`
	At   time.Time `json:"at"`
}

// timersAtOnce is how many timers setTimers hands schedule at once, to be
// in flight together: one synchronous publish each made setting every
// timer on a start a round trip per job within its retention.
const timersAtOnce = 256

// timerAckWait is how long a timer set waits for the server to store it.
const timerAckWait = 30 * time.Second

// schedule sets timers with asynchronous publishes, and waits for each to
// be stored: a few for one job, or a batch of at most timersAtOnce
// (setTimers). A schedule has a precision of one second, so the time is
// rounded up: a timer never fires before its time.
func (s *Service) schedule(ctx context.Context, timers []Timer) error {
	failed := make([]error, len(timers))
	futures := make([]jetstream.PubAckFuture, len(timers))
	when := make([]time.Time, len(timers))
	for i, t := range timers {
		when[i] = t.At.UTC().Truncate(time.Second)
		if when[i].Before(t.At) {
			when[i] = when[i].Add(time.Second)
		}
		body, err := json.Marshal(timerBody{Kind: t.Kind, Job: t.Job, At: when[i]})
		if err == nil {
			futures[i], err = s.js.PublishAsync(events.TimerSubject(t.Kind, t.Job, false), body,
				jetstream.WithScheduleAt(when[i]),
				jetstream.WithScheduleTarget(events.TimerSubject(t.Kind, t.Job, true)),
				jetstream.WithScheduleTTL(events.TimerDueTTL))
		}
		failed[i] = err
	}
	for i, err := range bus.AwaitAcks(ctx, futures, timerAckWait) {
		if err != nil {
			failed[i] = err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// Those not known to be stored are set again.
	var errs []error
	for i, err := range failed {
		if err != nil {
			errs = append(errs, fmt.Errorf("set %s timer of %s at %s: %w", timers[i].Kind, timers[i].Job, when[i].Format(time.RFC3339), err))
		}
	}
	return errors.Join(errs...)
}

// runTimers handles the timers that fire until ctx ends, or until it
// cannot go on. Its poison, like the rest of OUTPUT's, goes to
// e31.poison.output.
func (s *Service) runTimers(ctx context.Context) error {
	return bus.Run(ctx, s.js, s.pub, "output", s.log, bus.Handler{
		Name:  "timers",
		Topic: timerTopic,
		Subscriber: bus.SubscriberConfig{
			Stream: events.TimerStream, Durable: "output-timers", Lanes: 16,
			// A sweep of a job with many files may take a while; the
			// subscriber keeps it alive meanwhile.
			AckWait: 30 * time.Second,
		},
		Message: s.handleTimer,
	})
}

// handleTimer does what a timer that fired is for.
func (s *Service) handleTimer(m *message.Message) error {
	subject := m.Metadata.Get(bus.MetaSubject)
	timer, err := events.ParseSubject(subject)
	if err != nil || timer.Space != events.SpaceTimer || !timer.Due {
		return bus.Permanent(fmt.Errorf("output: %q is not a timer of a job", subject))
	}
	kind, job := timer.Kind, timer.Job
	ctx := m.Context()
	switch kind {
	case timerExpire, timerDelete:
		return s.Settle(ctx, job)
	case timerSweep:
		return s.Sweep(ctx, job)
	}
	return bus.Permanent(fmt.Errorf("output: unknown timer kind %q", kind))
}

// Settle records whatever deletion is due for a job now (DecideDelete),
// once, whoever else does the same. Then it sets what follows: the sweep
// of the objects a deletion freed, and, for a timer that fired early or a
// request for one part only, the retention of what is left.
func (s *Service) Settle(ctx context.Context, job string) error {
	history, err := s.readJob(ctx, job)
	if err != nil || len(history) == 0 {
		return err
	}
	now := s.now()
	// after is what React read behind history, on a conflict: what it
	// stored follows it in the log.
	var after []events.Envelope
	stored, err := s.pub.React(ctx, history[len(history)-1], func(read []events.Envelope) ([]events.Event, error) {
		after = read
		return DecideDelete(append(history[:len(history):len(history)], read...), now), nil
	})
	if err != nil {
		return fmt.Errorf("settle retention of %s: %w", job, err)
	}
	for _, e := range stored {
		d := e.Event.(*events.Deleted)
		s.log.Info("deleted", "job", job, "what", d.What, "cause", d.Cause, "files", d.Files, "bytes", d.Bytes, "seq", e.Seq)
	}
	// The job's history is now what was read and what was stored, and
	// nothing is read again: a Deleted is appended at the end of the log,
	// and a read of the job up to it makes the server look through all
	// the log after the job's earlier events, on every deletion of a job
	// that ended long ago.
	if len(stored) > 0 {
		history = append(append(history, after...), stored...)
	}
	h := heldBy(history)
	if h == nil || !h.Over {
		return nil // its end sets its timers
	}
	var next []Timer
	if h.holds(events.WhatData) || h.holds(events.WhatOutput) {
		next = append(next, Timer{Kind: timerExpire, Job: job, At: h.Expires()})
	}
	if last := h.Deleted.Last(); !last.IsZero() {
		next = append(next, Timer{Kind: timerSweep, Job: job, At: last.Add(s.grace)})
	}
	return s.schedule(ctx, next)
}

// readJob reads one job's history.
func (s *Service) readJob(ctx context.Context, job string) ([]events.Envelope, error) {
	history, err := bus.ReadJob(ctx, s.js, job, 1)
	if err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	return history, nil
}
