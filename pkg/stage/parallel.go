package stage

import (
	"context"
	"sync"
	"sync/atomic"
)

// Parallel is how many files move at once. Small files are dominated by
// round trips to the store (a stat, then a put or get, each waiting for an
// acknowledgement), so overlapping them is what makes a folder of many small
// files fast; more than a few dozen only queues at the server.
var Parallel = 16

// each calls fn(ctx, i) for every i in [0, n) on at most workers goroutines,
// and returns the first error, after cancelling the calls still running.
func each(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next  atomic.Int64
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return parent.Err()
}
