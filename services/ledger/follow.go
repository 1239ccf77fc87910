package ledger

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/e31net/e31/pkg/bus"
)

// batchSize is how many messages are prepared together: enough that handing
// a batch to a worker costs little next to preparing it, few enough that a
// query waits for no more than a fraction of a millisecond of folding.
const batchSize = 256

// batch is a run of consecutive messages, prepared by one worker and folded
// in by the one goroutine that applies, in the order the batches were read.
type batch struct {
	in   []Stored
	out  []Prepared
	last bool // the last message was the last in the stream when read
	done chan struct{}
}

// follow reads every message of the stream from the first, for ever, and
// applies them in order. Reading, preparing (digest and decode, the costly
// part, on every core) and folding (in order, under the lock) overlap.
func (s *Service) follow(ctx context.Context) error {
	start := time.Now()
	// Not nats.go's ordered consumer: one empty message with a Status
	// header, which any tenant may store, stops it for ever (see
	// bus.Follower).
	iter, err := bus.Follow(ctx, s.js, nil, 1)
	if err != nil {
		return fmt.Errorf("read the log: %w", err)
	}
	defer iter.Stop()
	if iter.Pending() == 0 {
		s.applyBatch(nil, true)
		s.log.Info("the log is empty: nothing to rebuild")
	}

	workers := s.cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	work := make(chan *batch, 2*workers)
	ordered := make(chan *batch, 4*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				b.out = make([]Prepared, len(b.in))
				for i, m := range b.in {
					b.out[i] = Prepare(m)
				}
				close(b.done)
			}
		}()
	}
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		for b := range ordered {
			<-b.done
			if s.applyBatch(b.out, b.last) {
				info := s.info(0)
				took := time.Since(start)
				s.log.Info("records rebuilt from the log", "records", info.Records, "seq", info.Applied,
					"took", took.Round(time.Millisecond), "events_per_s", int(float64(info.Applied)/max(took.Seconds(), 1e-9)))
			}
		}
	}()

	err = s.read(ctx, iter, work, ordered)
	close(work)
	close(ordered)
	wg.Wait()
	<-applied
	return err
}

// read hands the stream to the workers in batches, in order. A batch is
// handed over when it is full or when it holds the last message the stream
// had when it was read, so that a live event is folded in at once.
func (s *Service) read(ctx context.Context, iter *bus.Follower, work, ordered chan<- *batch) error {
	b := &batch{in: make([]Stored, 0, batchSize), done: make(chan struct{})}
	for {
		m, pending, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read the log: %w", err)
		}
		b.in = append(b.in, Stored{Seq: m.Sequence, Subject: m.Subject, Header: m.Header, Data: m.Data})
		if len(b.in) < batchSize && pending > 0 {
			continue
		}
		b.last = pending == 0
		select {
		case ordered <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case work <- b:
		case <-ctx.Done():
			close(b.done)
			return ctx.Err()
		}
		b = &batch{in: make([]Stored, 0, batchSize), done: make(chan struct{})}
	}
}
