package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// follow keeps the projection (s.refs) up to date with the log, from its
// first event, until ctx ends. Every instance follows the whole log: the
// projection is rebuilt on every start, like the ledger's. Once it has read
// the log as it was when it started, it sets every timer a job is waiting
// for (a timer that was lost, or never set because OUTPUT was down, is set
// again; setting one twice changes nothing), and from then on the timers
// each new event calls for.
func (s *Service) follow(ctx context.Context) error {
	start := time.Now()
	for {
		err := s.followFrom(ctx, start)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("following the log failed; starting again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (s *Service) followFrom(ctx context.Context, start time.Time) error {
	s.mu.Lock()
	from := s.refs.Applied() + 1
	s.mu.Unlock()
	// Not nats.go's ordered consumer, which a tenant's empty message with
	// a Status header stops for ever: see bus.Follower.
	iter, err := bus.Follow(ctx, s.js, nil, from)
	if err != nil {
		return fmt.Errorf("follow from #%d: %w", from, err)
	}
	defer iter.Stop()
	if iter.Pending() == 0 {
		s.caughtUpNow(ctx, start)
	}
	for {
		m, pending, err := iter.Next()
		if err != nil {
			return fmt.Errorf("follow: %w", err)
		}
		seq := m.Sequence
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil && !events.IsUnknownType(err) {
			s.log.Warn("skipping an event that does not decode", "seq", seq, "err", err)
		}
		s.mu.Lock()
		var timers []Timer
		if err == nil {
			env.Seq = seq
			timers = s.refs.Apply(env)
		}
		s.refs.applied = max(s.refs.applied, seq)
		live := s.caughtUp
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		if live {
			s.setTimers(ctx, timers)
		}
		if pending == 0 && !live {
			s.caughtUpNow(ctx, start)
		}
	}
}

// caughtUpNow marks the projection as rebuilt and sets every pending timer.
func (s *Service) caughtUpNow(ctx context.Context, start time.Time) {
	s.mu.Lock()
	if s.caughtUp {
		s.mu.Unlock()
		return
	}
	s.caughtUp = true
	var timers []Timer
	for _, h := range s.refs.Jobs() {
		timers = append(timers, s.refs.Pending(h)...)
	}
	jobs, applied := len(s.refs.jobs), s.refs.Applied()
	s.mu.Unlock()
	s.log.Info("retention: stored data projected from the log", "jobs", jobs, "seq", applied, "timers", len(timers), "took", time.Since(start).Round(time.Millisecond))
	s.setTimers(ctx, timers)
}

// setTimers schedules timers, retrying for a while: a timer that is not
// set is set again on the next start, but a deletion should not wait that
// long.
func (s *Service) setTimers(ctx context.Context, timers []Timer) {
	delay := 100 * time.Millisecond
	for len(timers) > 0 {
		err := s.schedule(ctx, timers)
		if err == nil {
			return
		}
		if delay > time.Minute {
			s.log.Error("retention: timers not set; they are set again when OUTPUT restarts", "timers", len(timers), "err", err)
			return
		}
		s.log.Warn("retention: setting timers failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// waitFor blocks until the projection has applied seq.
func (s *Service) waitFor(ctx context.Context, seq uint64) error {
	for {
		s.mu.Lock()
		applied, ch := s.refs.Applied(), s.changed
		s.mu.Unlock()
		if applied >= seq {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("the projection has read the log up to #%d, not yet #%d: %w", applied, seq, ctx.Err())
		}
	}
}

// waitCurrent blocks until the projection has applied everything logged
// before the call.
func (s *Service) waitCurrent(ctx context.Context) error {
	st, err := s.js.Stream(ctx, events.Stream)
	if err != nil {
		return fmt.Errorf("the log: %w", err)
	}
	return s.waitFor(ctx, st.CachedInfo().State.LastSeq)
}
