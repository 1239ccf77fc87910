package retention

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/stage"
)

// objectIndex counts, for every object in the store, how many live roots
// are stored in it. It is built from the projection's live roots when a
// sweep needs it (expanding a root reads its manifest and looks up each
// file), and brought up to date before every sweep. Only sweeps use it,
// one at a time.
type objectIndex struct {
	x        *stage.Expander
	counted  map[Root][]string // the objects each counted root added
	complete map[Root]bool
	count    map[string]int
}

func newObjectIndex(x *stage.Expander) *objectIndex {
	return &objectIndex{x: x, counted: map[Root][]string{}, complete: map[Root]bool{}, count: map[string]int{}}
}

// sync makes the counts those of exactly the live roots. A root whose
// expansion was incomplete (some of it was not stored yet) is expanded
// again, since it may be complete now.
func (ix *objectIndex) sync(ctx context.Context, live map[Root]bool) error {
	for root := range ix.counted {
		if !live[root] {
			ix.uncount(root)
		}
	}
	var todo []Root
	for root := range live {
		if !ix.complete[root] {
			todo = append(todo, root)
		}
	}
	names := make([][]string, len(todo))
	complete := make([]bool, len(todo))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range todo {
		g.Go(func() error {
			var err error
			names[i], complete[i], err = ix.x.Objects(gctx, todo[i].Kind, todo[i].Digest)
			if err != nil {
				return fmt.Errorf("objects of %s %s: %w", todo[i].Kind, todo[i].Digest, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, root := range todo {
		ix.uncount(root)
		ix.counted[root] = names[i]
		ix.complete[root] = complete[i]
		for _, n := range names[i] {
			ix.count[n]++
		}
	}
	return nil
}

func (ix *objectIndex) uncount(root Root) {
	for _, n := range ix.counted[root] {
		if ix.count[n]--; ix.count[n] <= 0 {
			delete(ix.count, n)
		}
	}
	delete(ix.counted, root)
	delete(ix.complete, root)
}

// Sweep removes from the store the objects of what a job deleted that no
// live job holds: its dropped roots, expanded, less every object a live
// root of the same store is stored in. It runs a grace period after the
// deletion (see DefaultDeleteGrace), on a projection that has caught up
// with the log (every job that holds anything, from its first event: see
// Checkpoint), so that a job which took up the same bytes meanwhile keeps
// them. Running it again deletes nothing more: objects already gone are
// not an error.
func (s *Service) Sweep(ctx context.Context, job string) error {
	if s.stores == nil {
		return nil
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if err := s.tail.WaitCurrent(ctx); err != nil {
		return fmt.Errorf("sweep %s: %w", job, err)
	}
	s.mu.Lock()
	h := s.refs.Job(job)
	var dropped []Root
	var logs []int
	var submitter string
	if h != nil {
		dropped = slices.Collect(maps.Keys(h.Dropped))
		logs = slices.Clone(h.DroppedLogs)
		submitter = h.Submitter
	}
	live := s.refs.Live()
	s.mu.Unlock()
	if h == nil {
		// Forgotten (see Refs.Forget), or read again since a restart: the
		// job's log says what its deletions dropped. Sweeping what is
		// gone already deletes nothing more.
		history, err := s.readJob(ctx, job)
		if err != nil {
			return fmt.Errorf("sweep %s: %w", job, err)
		}
		if h := heldBy(history); h != nil {
			dropped = slices.Collect(maps.Keys(h.Dropped))
			logs = slices.Clone(h.DroppedLogs)
			submitter = h.Submitter
		}
	}
	if len(logs) > 0 {
		if err := s.sweepLogs(ctx, job, submitter, logs); err != nil {
			return err
		}
	}
	if len(dropped) == 0 {
		s.mu.Lock()
		s.refs.Swept(job, nil, nil, s.now())
		s.mu.Unlock()
		return nil
	}
	// Roots are counted per store: a submitter's objects are in its own
	// store, and only its own jobs can hold them.
	byStore := map[stage.Store][]Root{}
	liveIn := map[stage.Store]map[Root]bool{}
	storeOf := func(tenant string) (stage.Store, error) { return s.stores.For(ctx, tenant) }
	for _, root := range dropped {
		st, err := storeOf(root.Tenant)
		if err != nil {
			return fmt.Errorf("sweep %s: %w", job, err)
		}
		byStore[st] = append(byStore[st], root)
		liveIn[st] = map[Root]bool{}
	}
	for root := range live {
		st, err := storeOf(root.Tenant)
		if err != nil {
			return fmt.Errorf("sweep %s: %w", job, err)
		}
		if set, ok := liveIn[st]; ok {
			set[root] = true
		}
	}
	total := 0
	for st, roots := range byStore {
		ix := s.index[st]
		if ix == nil {
			ix = newObjectIndex(stage.NewExpander(st))
			s.index[st] = ix
		}
		if err := ix.sync(ctx, liveIn[st]); err != nil {
			return fmt.Errorf("sweep %s: %w", job, err)
		}
		var doomed []string
		for _, root := range roots {
			if live[root] {
				continue // another job holds all of it
			}
			names, _, err := ix.x.Objects(ctx, root.Kind, root.Digest)
			if err != nil {
				return fmt.Errorf("sweep %s: objects of %s: %w", job, root.Digest, err)
			}
			for _, n := range names {
				if ix.count[n] == 0 {
					doomed = append(doomed, n)
				}
			}
		}
		slices.Sort(doomed)
		doomed = slices.Compact(doomed)
		if err := stage.DeleteObjects(ctx, st, doomed); err != nil {
			return fmt.Errorf("sweep %s: %w", job, err)
		}
		ix.x.Forget(doomed)
		total += len(doomed)
	}
	s.mu.Lock()
	s.refs.Swept(job, dropped, nil, s.now())
	s.mu.Unlock()
	s.log.Info("swept", "job", job, "roots", len(dropped), "objects_deleted", total)
	return nil
}

// sweepLogs removes the logs of the attempts of job that were deleted with
// its output. A log is its job's alone (stored under its job's name, not
// by content), so no other job can hold it and it needs no counting.
func (s *Service) sweepLogs(ctx context.Context, job, submitter string, attempts []int) error {
	st, err := s.stores.For(ctx, submitter)
	if err != nil {
		return fmt.Errorf("sweep logs of %s: %w", job, err)
	}
	for _, attempt := range attempts {
		if err := stage.DeleteLog(ctx, st, job, attempt); err != nil {
			return fmt.Errorf("sweep %s: %w", job, err)
		}
	}
	s.mu.Lock()
	s.refs.Swept(job, nil, attempts, s.now())
	s.mu.Unlock()
	s.log.Info("swept logs", "job", job, "attempts", len(attempts))
	return nil
}
