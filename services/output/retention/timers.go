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

// schedule sets timers. A schedule has a precision of one second, so the
// time is rounded up: a timer never fires before its time.
func (s *Service) schedule(ctx context.Context, timers []Timer) error {
	var errs []error
	for _, t := range timers {
		when := t.At.UTC().Truncate(time.Second)
		if when.Before(t.At) {
			when = when.Add(time.Second)
		}
		body, err := json.Marshal(timerBody{Kind: t.Kind, Job: t.Job, At: when})
		if err != nil {
			return err
		}
		_, err = s.js.Publish(ctx, events.TimerSubject(t.Kind, t.Job, false), body,
			jetstream.WithScheduleAt(when),
			jetstream.WithScheduleTarget(events.TimerSubject(t.Kind, t.Job, true)),
			jetstream.WithScheduleTTL(events.TimerDueTTL))
		if err != nil {
			errs = append(errs, fmt.Errorf("set %s timer of %s at %s: %w", t.Kind, t.Job, when.Format(time.RFC3339), err))
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
	stored, err := s.pub.React(ctx, history[len(history)-1], func(after []events.Envelope) ([]events.Event, error) {
		return DecideDelete(append(history[:len(history):len(history)], after...), now), nil
	})
	if err != nil {
		return fmt.Errorf("settle retention of %s: %w", job, err)
	}
	for _, e := range stored {
		d := e.Event.(*events.Deleted)
		s.log.Info("deleted", "job", job, "what", d.What, "cause", d.Cause, "files", d.Files, "bytes", d.Bytes, "seq", e.Seq)
	}
	if len(stored) > 0 {
		if history, err = s.readJob(ctx, job); err != nil {
			return err
		}
	}
	h := heldBy(history)
	if h == nil || !h.Over {
		return nil // its end sets its timers
	}
	var next []Timer
	if h.holds(events.WhatData) || h.holds(events.WhatOutput) {
		next = append(next, Timer{Kind: timerExpire, Job: job, At: h.Expires()})
	}
	var last time.Time
	for _, at := range h.Deleted {
		if at.After(last) {
			last = at
		}
	}
	if !last.IsZero() {
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
