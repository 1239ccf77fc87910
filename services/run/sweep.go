package run

import (
	"context"
	"fmt"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// A sweep's cancel (events.SweepCancel) is one event on the sweep's id, not
// on each member's, so a member's own history does not show it. It covers
// every member of the sweep of its round or an earlier one
// (events.CancelRequested.Round) that its sender may cancel. RUN stops a
// member for it in two ways, which together leave no gap:
//
//   - before it starts a member, it reads the last cancel of the member's
//     sweep by the member's submitter and by the operator: one that
//     covers the member stops it before it starts (sweepStart);
//   - a sweep's cancel delivered while a member is registered as running
//     here stops it (cancelSweep), as a job's own cancel stops the job.
//
// The member is registered as running before the read, so a cancel
// stored after the read is delivered while it is registered.

// sweepCancelOf reads the last cancels of the sweep of held by its
// submitter and by the operator, and returns one that covers it, as the
// member's own history would show it, or nil.
func (s *Service) sweepCancelOf(ctx context.Context, job string, held *events.ComputeHeld) (*events.Envelope, error) {
	sw := held.Spec.Sweep
	var subjects []string
	for _, by := range []string{held.Submitter, events.Operator} {
		subj, err := events.SubjectOf(sw.ID, &events.CancelRequested{By: by})
		if err != nil {
			return nil, fmt.Errorf("run: sweep %s of %s: %w", sw.ID, job, err)
		}
		subjects = append(subjects, subj)
	}
	msgs, _, err := bus.LastOf(ctx, s.js, events.Stream, subjects)
	if err != nil {
		return nil, fmt.Errorf("run: read the cancels of sweep %s for %s: %w", sw.ID, job, err)
	}
	for _, m := range msgs {
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			continue
		}
		if c, ok := events.SweepCancel(env.Event); ok && covers(c, sw, held.Submitter) {
			env.Seq = m.Sequence
			return &env, nil
		}
	}
	return nil, nil
}

// covers reports whether a sweep's cancel c covers a member of it at point
// sw, submitted by submitter.
func covers(c *events.CancelRequested, sw *events.SweepPoint, submitter string) bool {
	return sw.Again <= c.Round && events.MayCancel(c.By, submitter)
}

// cancelSweep stops every member of the cancelled sweep registered as
// running here that the cancel covers.
func (s *Service) cancelSweep(env events.Envelope, c *events.CancelRequested) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for job, r := range s.running {
		if r.sweep != nil && r.sweep.ID == env.Subject && covers(c, r.sweep, r.submitter) {
			s.log.Info("cancelling with its sweep", "job", job, "sweep", env.Subject, "attempt", r.attempt)
			r.cancel(errCancelRequested)
		}
	}
}

// sweepStart returns decide, for a member of a sweep whose cancel covers
// it, with that cancel at the head of what happened since the hold, as the
// member's own cancel would be. A job of no sweep gets decide as it is.
func (s *Service) sweepStart(ctx context.Context, job string, held *events.ComputeHeld, decide bus.Decision) (bus.Decision, error) {
	if held.Spec.Sweep == nil {
		return decide, nil
	}
	cancel, err := s.sweepCancelOf(ctx, job, held)
	if err != nil || cancel == nil {
		return decide, err
	}
	return func(after []events.Envelope) ([]events.Event, error) {
		return decide(append([]events.Envelope{*cancel}, after...))
	}, nil
}
