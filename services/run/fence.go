package run

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/lease"
	"github.com/e31net/e31/pkg/retry"
	"github.com/e31net/e31/services/run/executor"
)

// A node fences itself: it stops its own jobs before the pool may count it
// lost and hold them again elsewhere, so that two attempts of one job never
// run at once (pkg/lease says the margins and why).
//
// keepLease renews the node's lease on the node's own monotonic clock.
// When no renewal can be shown for the TTL less the fence margin (a
// partition, closed or silent; a NATS server that answers nothing), or a
// renewal answers that the lease is gone, the node:
//
//  1. fences: every job it runs is cancelled with SIGTERM at once and
//     SIGKILL at the TTL less half the margin, before the lease can lapse;
//     no job starts until it has a lease again (HandleHeld waits);
//  2. stores nothing of those attempts (no output, no logs: execute) and
//     cleans their workspaces; each one's stop (node_lost) is recorded
//     once NATS answers again, unless the attempt was given up as lost
//     meanwhile (DecideStop), in which case nothing of it is;
//  3. joins the pool again as a new boot, once NATS answers.

// fencedReason is what the stop of a job the fence ended says.
const fencedReason = "the node could not renew its lease in time and stopped the job before the lease could lapse"

// causeOf is why ctx ended: its cause, less the Stop that carries a
// SIGKILL deadline.
func causeOf(ctx context.Context) error {
	err := context.Cause(ctx)
	var stop *executor.StopBy
	if errors.As(err, &stop) {
		return stop.Err
	}
	return err
}

// keepLease renews the node's lease until ctx ends, then gives it up. If
// the node fences itself, it stops every job, waits until NATS answers and
// joins the pool again as a new boot, trying for as long as it takes.
func (s *Service) keepLease(ctx context.Context, kv jetstream.KeyValue, l *lease.Lease) error {
	for {
		fenced := false
		err := l.KeepFenced(ctx, s.margins.Fence, func() { fenced = true; s.fenceFor(l, lease.ErrFenced) })
		if ctx.Err() != nil {
			release, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := l.Release(release); err != nil {
				s.log.Warn("giving up the node's lease; the pool counts the node gone when it lapses", "err", err)
				return nil
			}
			s.mu.Lock()
			boot := s.boot
			s.mu.Unlock()
			if err := s.leaseSeen(release, func(held string) bool { return held != boot }); err != nil {
				s.log.Warn("the lease given up is not yet seen gone where RENT watches", "err", err)
			}
			return nil
		}
		switch {
		case errors.Is(err, lease.ErrLost) && !fenced:
			// Found out from a renewal: the pool may have held the jobs
			// again already, and they are killed at once.
			s.fenceFor(l, err)
		case errors.Is(err, lease.ErrFenced), errors.Is(err, lease.ErrLost):
		default:
			return fmt.Errorf("run: keep the node's lease: %w", err)
		}
		// Whatever the error: a node cut off is answered by timeouts, and
		// one whose lease bucket refuses writes by the server's errors.
		l, err = retry.Value(ctx, retry.Rejoin, func() (*lease.Lease, error) { return s.announce(ctx, kv) },
			retry.If(retry.Always), retry.OnRetry(func(err error, in time.Duration) {
				s.log.Warn("joining the pool again failed; retrying", "in", in, "err", err)
			}))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("run: join the pool again: %w", err)
		}
		s.unfence()
	}
}

// fenceFor fences the node for the lease l, lost or about to lapse (why):
// SIGTERM to every job now, SIGKILL by the TTL less half the fence margin
// after its last renewal (at once if that is past).
func (s *Service) fenceFor(l *lease.Lease, why error) {
	term, kill := s.margins.StopTimes(l.Expiry())
	stopped := s.fence(&executor.StopBy{Err: errFenced, KillBy: kill})
	s.log.Error("the node fences itself: it stops every job it runs, which the pool may hold again elsewhere once its lease lapses",
		"err", why, "jobs", stopped, "sigterm_in", time.Until(term).Round(time.Millisecond),
		"sigkill_in", time.Until(kill).Round(time.Millisecond), "lease_expires_in", time.Until(l.Expiry()).Round(time.Millisecond))
}

// reconnect makes the node's NATS client give its connection up and try
// the servers again now: a lease renewal went unanswered, and a connection
// to a server cut off silently looks alive until its pings time out
// (pkg/connect), by when the node would have fenced itself for nothing.
func (s *Service) reconnect() {
	nc := s.js.Conn()
	if nc == nil || !nc.IsConnected() {
		return
	}
	s.log.Warn("a lease renewal went unanswered: reconnecting to NATS", "server", nc.ConnectedUrlRedacted())
	if err := nc.ForceReconnect(); err != nil {
		s.log.Warn("reconnecting to NATS", "err", err)
	}
}

// fence stops every job the node runs with cause, and every job that
// would start, until unfence. It returns how many it stopped.
func (s *Service) fence(cause *executor.StopBy) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fenced = cause
	if s.rejoined == nil {
		s.rejoined = make(chan struct{})
	}
	for _, r := range s.running {
		r.cancel(cause)
	}
	return len(s.running)
}

// unfence lets jobs start again: the node holds a new lease.
func (s *Service) unfence() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fenced = nil
	if s.rejoined != nil {
		close(s.rejoined)
		s.rejoined = nil
	}
}

// waitRejoined returns once the node is not fenced, or with ctx's error.
func (s *Service) waitRejoined(ctx context.Context) error {
	s.mu.Lock()
	ch := s.rejoined
	s.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
