package ledger

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
)

// batchSize is how many messages are prepared together: enough that
// splitting a batch over the cores costs little next to preparing it, few
// enough that a query waits for no more than a millisecond or two of
// folding. A live event is handed over at once, alone.
const batchSize = 1024

// newTail is how the ledger follows the log: every message from from, the
// one after its checkpoint.
func (s *Service) newTail(from uint64) *bus.Tail {
	return bus.NewTail(s.js, bus.TailOptions{From: from, Batch: batchSize, Logger: s.log, CaughtUp: s.rebuilt})
}

// follow reads every message of the stream from the first, for ever, and
// applies them in order: each batch is prepared (digest and decode, the
// costly part) on every core, then folded in under the lock. Reading goes
// on meanwhile: the follower pulls ahead.
func (s *Service) follow(ctx context.Context) error {
	s.start = time.Now()
	workers := s.cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return s.tail.Run(ctx, func(_ context.Context, msgs []*jetstream.RawStreamMsg) error {
		out := make([]Prepared, len(msgs))
		prepare := func(lo, hi int) {
			for i := lo; i < hi; i++ {
				out[i] = Prepare(storedOf(msgs[i]))
			}
		}
		chunk := (len(msgs) + workers - 1) / workers
		if workers == 1 || chunk < 16 {
			prepare(0, len(msgs))
		} else {
			var wg sync.WaitGroup
			for lo := 0; lo < len(msgs); lo += chunk {
				wg.Go(func() { prepare(lo, min(lo+chunk, len(msgs))) })
			}
			wg.Wait()
		}
		return s.applyBatch(out)
	})
}

// rebuilt logs the end of the catching up: the log as it was when the
// ledger started is folded in.
func (s *Service) rebuilt(context.Context) {
	s.mu.Lock()
	s.live = true
	s.mu.Unlock()
	first := false
	s.caughtOnce.Do(func() { first = true; close(s.caughtUp) })
	if !first {
		return // started again from another instance's checkpoint
	}
	info := s.info(0)
	from, folded := s.Started()
	if info.Applied == 0 {
		s.log.Info("the log is empty: nothing to fold in")
		return
	}
	took := time.Since(s.start)
	s.log.Info("records caught up with the log", "records", info.Records, "seq", info.Applied, "from_checkpoint", from,
		"folded", folded, "took", took.Round(time.Millisecond), "events_per_s", int(float64(folded)/max(took.Seconds(), 1e-9)))
}
