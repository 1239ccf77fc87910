package rent

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/lease"
	"github.com/e31net/e31/pkg/query/wire"
)

// Schedule makes one scheduling pass, as the scheduler does when Handle wakes
// it, so that a test can deliver an event and see what RENT decides from it
// synchronously. Only a leader decides: see Lead.
func (s *Service) Schedule(ctx context.Context) error { return s.schedule(ctx) }

// Lead takes the leader lease, as Run does, and gives it up when the test
// ends or when the returned function is called, whichever comes first.
func (s *Service) Lead(tb testing.TB, ctx context.Context) (resign func()) {
	tb.Helper()
	kv, err := s.js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := lease.Acquire(ctx, kv, leaderKey, s.instance)
	if err != nil {
		tb.Fatalf("lead: %v", err)
	}
	s.mu.Lock()
	s.leader = l
	s.mu.Unlock()
	done := false
	resign = func() {
		if done {
			return
		}
		done = true
		s.mu.Lock()
		s.leader = nil
		s.mu.Unlock()
		_ = l.Release(context.WithoutCancel(ctx))
	}
	tb.Cleanup(resign)
	return resign
}

// Tracked is how many jobs the service keeps anything of: in the pool, live
// or ended (all), live only, and the trace contexts it keeps for them.
func (s *Service) Tracked() (all, live, traces int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all, live = s.pool.Tracked()
	return all, live, len(s.traces)
}

// WaitApplied returns once the service has read the log up to seq.
func (s *Service) WaitApplied(ctx context.Context, seq uint64) error {
	return s.tail.WaitFor(ctx, seq)
}

// Why is what the pool says of a job, as the operator is told.
func (s *Service) Why(id string) wire.WhyReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pool.Why(id)
}

// Follow hands msgs to the service as its tail does, and reports whether
// that woke the scheduler.
func (s *Service) Follow(ctx context.Context, msgs ...*jetstream.RawStreamMsg) (woke bool, err error) {
	select {
	case <-s.kick:
	default:
	}
	if err := s.follow(nil)(ctx, msgs); err != nil {
		return false, err
	}
	select {
	case <-s.kick:
		return true, nil
	default:
		return false, nil
	}
}

// FreeDevices is, for each node that announced devices, the devices the
// pool would give a job now, in the node's order.
func FreeDevices(p *Pool) map[string][]string {
	out := map[string][]string{}
	for name, n := range p.nodes.all {
		if n.devs != nil {
			out[name] = n.devs.freeList()
		}
	}
	return out
}
