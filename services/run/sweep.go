package run

import (
	"context"
	"fmt"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// A sweep's cancel (events.SweepCancel) is one event on the sweep's id, not
// on each member's, so a member's own history does not show it. RUN stops
// a member for it in two ways, which together leave no gap:
//
//   - before it starts a member, it reads the last cancel of the member's
//     sweep by the member's submitter and by the operator, and the
//     member's JobSubmitted: a sweep's cancel logged after the submission
//     stops the member before it starts (sweepCancelBefore);
//   - a sweep's cancel delivered while a member runs here stops it
//     (cancelSweep), as a job's own cancel stops the job.
//
// The member is registered as running before the read, so a cancel
// delivered during the read is kept on it (running.sweepCancel) and
// decided once the read says when the member was submitted. Only a cancel
// logged after the member's submission applies: a member submitted again
// after a cancel of its sweep (e31 submit --again) is not stopped by it.

// sweepCancelBefore reads whether the sweep of held has a cancel that
// applies to job, and the sequence of job's submission. cancel is that
// cancel, as job's history would show it, or nil.
func (s *Service) sweepCancelBefore(ctx context.Context, job string, held *events.ComputeHeld) (cancel *events.Envelope, submitted uint64, err error) {
	sweep := held.Spec.Sweep.ID
	subjects := make([]string, 0, 3)
	for _, ev := range []struct {
		id string
		ev events.Event
	}{
		{job, &events.JobSubmitted{}},
		{sweep, &events.CancelRequested{By: held.Submitter}},
		{sweep, &events.CancelRequested{By: events.Operator}},
	} {
		subj, err := events.SubjectOf(ev.id, ev.ev)
		if err != nil {
			return nil, 0, fmt.Errorf("run: sweep %s of %s: %w", sweep, job, err)
		}
		subjects = append(subjects, subj)
	}
	msgs, _, err := bus.LastOf(ctx, s.js, events.Stream, subjects)
	if err != nil {
		return nil, 0, fmt.Errorf("run: read the cancels of sweep %s for %s: %w", sweep, job, err)
	}
	var cancels []events.Envelope
	for _, m := range msgs {
		if m.Subject == subjects[0] {
			submitted = m.Sequence
			continue
		}
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if c, ok := events.SweepCancel(env.Event); err == nil && ok && events.MayCancel(c.By, held.Submitter) {
			env.Seq = m.Sequence
			cancels = append(cancels, env)
		}
	}
	for i := range cancels {
		if cancels[i].Seq > submitted && (cancel == nil || cancels[i].Seq > cancel.Seq) {
			cancel = &cancels[i]
		}
	}
	return cancel, submitted, nil
}

// cancelSweep stops every member of the cancelled sweep that runs here,
// was submitted before the cancel and may be cancelled by its sender; for
// a member whose submission is still being read, it keeps the cancel for
// HandleHeld to decide.
func (s *Service) cancelSweep(env events.Envelope, c *events.CancelRequested) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for job, r := range s.running {
		if r.sweep != env.Subject || !events.MayCancel(c.By, r.submitter) {
			continue
		}
		switch {
		case r.submitted == 0:
			r.sweepCancel = max(r.sweepCancel, env.Seq)
		case env.Seq > r.submitted:
			s.log.Info("cancelling with its sweep", "job", job, "sweep", env.Subject, "attempt", r.attempt)
			r.cancel(errCancelRequested)
		}
	}
}

// sweepStart reads, for a member of a sweep registered as r, whether its
// sweep's cancel applies to it, and returns decide with that cancel put at
// the head of what happened since the hold, as the member's own cancel
// would be. A job of no sweep gets decide as it is.
func (s *Service) sweepStart(ctx context.Context, job string, held *events.ComputeHeld, r *running, decide bus.Decision) (bus.Decision, error) {
	if held.Spec.Sweep == nil {
		return decide, nil
	}
	cancel, submitted, err := s.sweepCancelBefore(ctx, job, held)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	r.submitted = max(submitted, 1)
	pending := r.sweepCancel
	s.mu.Unlock()
	if cancel == nil && pending > submitted {
		cancel = &events.Envelope{Subject: held.Spec.Sweep.ID, Seq: pending, Event: &events.CancelRequested{By: held.Submitter, Sweep: true}}
	}
	if cancel == nil {
		return decide, nil
	}
	return func(after []events.Envelope) ([]events.Event, error) {
		return decide(append([]events.Envelope{*cancel}, after...))
	}, nil
}
