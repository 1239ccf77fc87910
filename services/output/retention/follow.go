package retention

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/retry"
)

// newTail is how retention follows the log: every instance follows it from
// its checkpoint (see Checkpoint), or from its first event without one,
// and the projection is rebuilt on every start. A failure to read is
// retried: the projection stands still meanwhile, and queries wait for it.
func (s *Service) newTail() *bus.Tail {
	return bus.NewTail(s.js, bus.TailOptions{Again: true, Logger: s.log, CaughtUp: s.caughtUpNow})
}

// follow keeps the projection (s.refs) up to date with the log until ctx
// ends. Once it has read the log as it was when it started, it sets every
// timer a job is waiting for (a timer that was lost, or never set because
// OUTPUT was down, is set again; setting one twice changes nothing), and
// from then on the timers each new event calls for.
func (s *Service) follow(ctx context.Context) error {
	s.start = time.Now()
	return s.tail.Run(ctx, func(ctx context.Context, msgs []*jetstream.RawStreamMsg) error {
		for _, m := range msgs {
			env, err := events.Decode(m.Subject, m.Header, m.Data)
			if err != nil && !events.IsUnknownType(err) {
				s.log.Warn("skipping an event that does not decode", "seq", m.Sequence, "err", err)
			}
			s.mu.Lock()
			var timers []Timer
			if err == nil {
				env.Seq = m.Sequence
				timers = s.refs.Apply(env)
			}
			s.refs.applied = max(s.refs.applied, m.Sequence)
			s.mu.Unlock()
			// Live is only set on this goroutine, between two batches:
			// until then, caughtUpNow sets every timer at once.
			if s.tail.Live() {
				s.setTimers(ctx, timers)
			}
		}
		return nil
	})
}

// caughtUpNow sets every pending timer, once the projection is rebuilt.
func (s *Service) caughtUpNow(ctx context.Context) {
	s.mu.Lock()
	var timers []Timer
	for _, h := range s.refs.Jobs() {
		timers = append(timers, s.refs.Pending(h)...)
	}
	jobs, applied := len(s.refs.jobs), s.refs.Applied()
	s.mu.Unlock()
	s.log.Info("retention: stored data projected from the log", "jobs", jobs, "from", s.from.Load(), "seq", applied, "timers", len(timers), "took", time.Since(s.start).Round(time.Millisecond))
	s.setTimers(ctx, timers)
}

// setTimers schedules timers, timersAtOnce at a time, each batch retried
// for a while (retry.Timers): a timer that is not set is set again on the
// next start, but a deletion should not wait that long. A batch that still
// fails leaves the rest to the next start too.
func (s *Service) setTimers(ctx context.Context, timers []Timer) {
	for i := 0; i < len(timers); i += timersAtOnce {
		batch := timers[i:min(i+timersAtOnce, len(timers))]
		err := retry.Do(ctx, retry.Timers, func() error { return s.schedule(ctx, batch) }, retry.If(retry.Always),
			retry.OnRetry(func(err error, in time.Duration) {
				s.log.Warn("retention: setting timers failed; retrying", "in", in, "err", err)
			}))
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("retention: timers not set; they are set again when OUTPUT restarts", "timers", len(timers)-i, "err", err)
			}
			return
		}
	}
}
