package client

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/stage"
)

// SweepOutputOptions says how OutputSweep shows its progress and how much
// it does at once.
type SweepOutputOptions struct {
	// Workers is how many members' output is fetched at once (each moves
	// up to stage.Parallel files at once); default 8.
	Workers int
	// Progress is told of the bytes of every point's output, in one phase,
	// those found in place already included; nil: none.
	Progress stage.Progress
	// Point, if set, is called once each point with output is written, with
	// how many are and how many there are to write, from one goroutine at
	// a time.
	Point func(done, total int)
}

// SweepOutput is what OutputSweep wrote: the form of `e31 output SWEEP
// --json`.
type SweepOutput struct {
	Sweep string `json:"sweep"`
	Dir   string `json:"dir"`
	// Points is how many points the sweep has; Written, how many of them
	// have their output under Dir/<index>/ now.
	Points  int `json:"points"`
	Written int `json:"written"`
	// FilesFetched and BytesFetched are what came from the store this
	// time; FilesKept, the files found in place already (a second run
	// fetches nothing that is there).
	FilesFetched int   `json:"files_fetched"`
	BytesFetched int64 `json:"bytes_fetched"`
	FilesKept    int   `json:"files_kept"`
	// Without lists the points with no output written, in index order:
	// their member did not succeed, is not over, or its output is gone or
	// could not be written whole (Error).
	Without []PointWithout `json:"without_output"`
}

// PointWithout is a point of a sweep whose output OutputSweep did not
// write, and why.
type PointWithout struct {
	Index   int            `json:"index"`
	Job     string         `json:"job"`
	State   string         `json:"state"`
	Outcome events.Outcome `json:"outcome,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	// Error says why output that was there could not be written.
	Error string `json:"error,omitempty"`
}

// OutputSweep writes the output of each point of a sweep that succeeded
// under dir/<index>/, as Output writes a job's: every file checked against
// its digest. Points are fetched several at once (opts.Workers). A file in
// place already (its size and digest those returned) is not fetched again,
// so a second run fetches only what is missing or differs: a run cut short
// goes on where it stopped, and a point submitted again (SubmitAgain) that
// succeeded since joins the folder. A point's member that did not succeed
// is listed in Without, not written: its partial output is the member's
// own (Output, by the member's id).
//
// It fails with ErrNoSuchJob if the id is no sweep of the asker's, and
// wraps ErrNoOutput when a point's output could not be written whole; the
// others are written in any case.
func (c *Client) OutputSweep(ctx context.Context, sweep, dir string, opts SweepOutputOptions) (SweepOutput, error) {
	recs, err := c.sweepRecords(ctx, sweep)
	if err != nil {
		return SweepOutput{}, err
	}
	points := Points(recs)
	res := SweepOutput{Sweep: sweep, Dir: filepath.Clean(dir), Points: len(points), Without: []PointWithout{}}
	var todo []*hold.HoldRecord
	var total int64
	for _, r := range points {
		switch {
		case r.Sweep == nil:
		case !r.Over() || r.Outcome != events.Succeeded:
			res.Without = append(res.Without, without(r, ""))
		case r.Output.DeletedAt != nil:
			res.Without = append(res.Without, without(r, "its output was deleted at "+r.Output.DeletedAt.UTC().Format(time.RFC3339)))
		default:
			todo = append(todo, r)
			total += r.Output.Bytes
		}
	}
	p := opts.Progress
	if p == nil {
		p = noProgress{}
	}
	p.Start(total, "output "+sweep)
	defer p.Done()
	var mu sync.Mutex
	failed := map[int]string{}
	workers := opts.Workers
	if workers <= 0 {
		workers = 8
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	stores := &storeCache{c: c, stores: map[string]stage.Store{}}
	for i, r := range todo {
		g.Go(func() error {
			got, err := c.outputPoint(gctx, stores, r, filepath.Join(dir, strconv.Itoa(r.Sweep.Index)), p)
			mu.Lock()
			defer mu.Unlock()
			res.FilesFetched += got.Files
			res.BytesFetched += got.Bytes
			res.FilesKept += got.Kept
			if err != nil {
				if gctx.Err() != nil {
					return err
				}
				failed[i] = err.Error()
			} else {
				res.Written++
			}
			if opts.Point != nil {
				opts.Point(res.Written+len(failed), len(todo))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	for i, msg := range failed {
		res.Without = append(res.Without, without(todo[i], msg))
	}
	slices.SortFunc(res.Without, func(a, b PointWithout) int { return a.Index - b.Index })
	if len(failed) > 0 {
		return res, kind(ErrNoOutput, fmt.Errorf("sweep %s: the output of %d point(s) could not be written whole (see each one's error)", sweep, len(failed)))
	}
	return res, nil
}

func without(r *hold.HoldRecord, msg string) PointWithout {
	w := PointWithout{Index: r.Sweep.Index, Job: r.Job, State: r.State, Reason: r.Reason, Error: msg}
	if r.Over() {
		w.Outcome = r.Outcome
	}
	return w
}

// outputPoint writes one point's output into dest: the files its record
// lists when it lists them all, else those of its manifest.
func (c *Client) outputPoint(ctx context.Context, stores *storeCache, r *hold.HoldRecord, dest string, p stage.Progress) (stage.Fetched, error) {
	s, err := stores.of(ctx, r.Submitter)
	if err != nil {
		return stage.Fetched{}, err
	}
	files := r.Output.List
	if len(files) < r.Output.Files {
		if r.Output.Manifest == "" {
			return stage.Fetched{}, fmt.Errorf("output of %s: its record lists %d of %d files and names no manifest", r.Job, len(files), r.Output.Files)
		}
		if files, err = stage.ManifestFiles(ctx, s, r.Output.Manifest); err != nil {
			return stage.Fetched{}, fmt.Errorf("output of %s: %w", r.Job, err)
		}
	}
	got, err := stage.FetchMissing(ctx, s, files, dest, phaseless{p})
	if err != nil {
		return got, fmt.Errorf("output of %s: %w", r.Job, err)
	}
	return got, nil
}

// storeCache opens each submitter's store once for a sweep's many points.
type storeCache struct {
	c      *Client
	mu     sync.Mutex
	stores map[string]stage.Store
}

func (s *storeCache) of(ctx context.Context, submitter string) (stage.Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.stores[submitter]; ok {
		return st, nil
	}
	st, err := s.c.Store(ctx, submitter)
	if err != nil {
		return nil, err
	}
	s.stores[submitter] = st
	return st, nil
}

// phaseless passes on the bytes done and none of the phases: the sweep's
// one phase holds every point's.
type phaseless struct{ stage.Progress }

func (phaseless) Start(int64, string) {}
func (phaseless) Done()               {}

type noProgress struct{}

func (noProgress) Start(int64, string) {}
func (noProgress) Add(int64)           {}
func (noProgress) Done()               {}

// WriteText writes what OutputSweep did, for people: how many points were
// written where, what moved, and the points without output, counted by
// why and the first of them by index.
func (o SweepOutput) WriteText(w io.Writer) error {
	p := &printer{w: w}
	p.printf("sweep %s: %d of %d point(s) written under %s/<index>/ (%d file(s), %s fetched; %d file(s) already in place)\n",
		o.Sweep, o.Written, o.Points, o.Dir, o.FilesFetched, HumanBytes(o.BytesFetched), o.FilesKept)
	if len(o.Without) == 0 {
		return p.err
	}
	why := map[string]int{}
	for _, x := range o.Without {
		why[x.why()]++
	}
	p.printf("%d point(s) without output: %s\n", len(o.Without), counts(why))
	for i, x := range o.Without {
		if i == maxListed {
			p.printf("  … and %d more (e31 output --json, or e31 status %s)\n", len(o.Without)-maxListed, o.Sweep)
			break
		}
		line := fmt.Sprintf("  [%d] %s", x.Index, x.why())
		if x.Error != "" {
			line += ": " + x.Error
		} else if x.Reason != "" {
			line += ": " + x.Reason
		}
		p.printf("%s (%s)\n", line, x.Job)
	}
	return p.err
}

// maxListed is how many points a sweep's text lists one by one.
const maxListed = 20

// why is a point's reason for having no output, in one word or two.
func (x PointWithout) why() string {
	switch {
	case x.Error != "":
		return "not written"
	case x.Outcome != "":
		return string(x.Outcome)
	}
	return x.State
}
