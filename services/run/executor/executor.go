// Package executor runs one job on a node and says how it stopped. An
// Executor is the only part of RUN that touches processes, so the plain child
// process of the walking skeleton and the real sandbox can be swapped.
//
// An Executor's Prepare returns a Job: the handle of one prepared attempt,
// which RUN stages input into (Dirs), runs (Run; cancelling its context
// stops the job) and releases on every path (Release). The handle carries
// the executor's own state of the job, so nothing looks it up; what every
// executor's handle must refuse (a second Run at once, a Run after
// Release, a second Release) is written once, in Guard. ByImage picks,
// per job, between two executors by whether the job names an image.
package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// Spec is one job to execute.
type Spec struct {
	JobID   string
	Attempt int
	// Submitter is whose job it is: what an executor's policy (the images
	// allowed) is read for.
	Submitter string
	Command   []string
	// Env is the declared environment; executors add E31_JOB_ID, E31_DATA and
	// E31_OUTPUT (the paths as the job sees them).
	Env   map[string]string
	Image string

	CPU         float64
	MemoryBytes int64
	DiskBytes   int64
	// Limit is the hard wall-clock limit, and Deadline the moment it ends:
	// every process the job has left gets SIGKILL at Deadline, and SIGTERM
	// Grace before it, so that a job that ignores SIGTERM still stops at its
	// limit. A zero Deadline means Limit after the job starts (see Stops);
	// RUN counts it from the hold instead, when the meter started.
	Limit    time.Duration
	Deadline time.Time
	Grace    time.Duration

	// GPUs are the devices the job holds and what it is given of them
	// (see GPUs); the zero value for a job that holds none.
	GPUs GPUs

	// Stdout and Stderr receive what the job writes to its stdout and
	// stderr, as it writes it, through pipes the executor reads (see
	// Pipes). They must not block: RUN's copy only keeps the bytes in
	// memory. Nil: the executor keeps them its own way, if at all.
	Stdout, Stderr io.Writer
}

// Stops returns when the job of spec, started at start, is sent SIGTERM
// and SIGKILL for its limit: zero times if it has none. SIGTERM never
// comes before the start.
func (s Spec) Stops(start time.Time) (term, kill time.Time) {
	kill = s.Deadline
	if kill.IsZero() {
		if s.Limit <= 0 {
			return time.Time{}, time.Time{}
		}
		kill = start.Add(s.Limit)
	}
	term = kill.Add(-s.Grace)
	if term.Before(start) {
		term = start
	}
	return term, kill
}

// GraceFor is the grace a job with the given limit gets before its
// deadline: the node's grace, but at most a tenth of the limit, so that a
// short job is not told to stop long before it has to.
func GraceFor(limit, grace time.Duration) time.Duration {
	return max(min(grace, limit/10), 0)
}

// Due returns a channel that receives at t, or nil (which never receives)
// for the zero time: a stop timer in an executor's select.
func Due(t time.Time) <-chan time.Time {
	if t.IsZero() {
		return nil
	}
	return time.After(time.Until(t))
}

// KillBy is when SIGKILL follows a SIGTERM sent at now for any reason but
// the limit (a cancel, the node stopping): a grace period later, but never
// past the limit's own SIGKILL, kill (zero: none).
func KillBy(now time.Time, grace time.Duration, kill time.Time) time.Time {
	by := now.Add(grace)
	if !kill.IsZero() && kill.Before(by) {
		return kill
	}
	return by
}

// StopBy is a cause of a job's cancel (context.WithCancelCause) that also
// says by when SIGKILL must come: a node that fenced itself must have every
// job dead before its lease can lapse, sooner than a grace period after
// SIGTERM may be. Err says why the job is stopped.
type StopBy struct {
	Err    error
	KillBy time.Time
}

func (s *StopBy) Error() string { return s.Err.Error() }

// Unwrap returns why the job is stopped.
func (s *StopBy) Unwrap() error { return s.Err }

// CancelKill is when SIGKILL must come for a job whose context ctx has
// ended, given the limit's SIGKILL, kill (zero: none): kill, or the StopBy
// the context was cancelled with, whichever is sooner. An executor passes
// it to KillBy.
func CancelKill(ctx context.Context, kill time.Time) time.Time {
	var stop *StopBy
	if errors.As(context.Cause(ctx), &stop) && !stop.KillBy.IsZero() && (kill.IsZero() || stop.KillBy.Before(kill)) {
		return stop.KillBy
	}
	return kill
}

// Dirs are a job's place on the node. RUN stages input into DataDir before
// Run and collects output from OutDir after it.
type Dirs struct {
	Root    string
	DataDir string
	OutDir  string
}

// Job is the handle Prepare returns: one prepared attempt of a job, which
// RUN runs once and releases on every path. Run and Release may be called
// from different goroutines; the Guard every executor's jobs share keeps
// them apart.
type Job interface {
	// Spec is what the job was prepared from.
	Spec() Spec
	// Dirs are the job's directories on the node, valid until Release.
	Dirs() Dirs
	// Run executes the job and returns only when no process of it is left.
	// At Spec.Stops it is stopped with outcome LimitExceeded. Cancelling ctx
	// stops it (SIGTERM, then SIGKILL at KillBy, or sooner where its cause
	// is a StopBy: CancelKill) with outcome Cancelled.
	// An error means the job could not be started at all (or was running
	// already, or was released: see Guard).
	Run(ctx context.Context) (Result, error)
	// Release removes everything Prepare made. RUN calls it once the output
	// is collected, on every path; it waits for a Run under way, and a
	// second call returns the first one's error.
	Release() error
}

// ErrRunning is returned by a Job's Run while another Run of it is under
// way, and ErrReleased by one after Release.
var (
	ErrRunning  = errors.New("executor: the job is running already")
	ErrReleased = errors.New("executor: the job was released")
)

// Guard is the bookkeeping every executor's Job needs, written once: Run
// at most one at a time and never after Release, and Release once, after
// the Run under way has returned. The zero Guard is ready; it must not be
// copied.
type Guard struct {
	ran      sync.Mutex // held while the job runs, and while it is released
	released bool
	once     sync.Once
	err      error
}

// Run calls run unless the job is running (ErrRunning) or was released
// (ErrReleased); job names it in those errors.
func (g *Guard) Run(job string, run func() (Result, error)) (Result, error) {
	if !g.ran.TryLock() {
		return Result{}, fmt.Errorf("run %s: %w", job, ErrRunning)
	}
	defer g.ran.Unlock()
	if g.released {
		return Result{}, fmt.Errorf("run %s: %w", job, ErrReleased)
	}
	return run()
}

// Release calls release once, after any Run under way has returned; every
// call returns the error of that one.
func (g *Guard) Release(release func() error) error {
	g.once.Do(func() {
		g.ran.Lock()
		defer g.ran.Unlock()
		g.released = true
		g.err = release()
	})
	return g.err
}

// Result is how the job stopped.
type Result struct {
	// Outcome is Succeeded, Failed, LimitExceeded, OutOfMemory, DiskExceeded
	// or Cancelled.
	Outcome events.Outcome
	// ExitCode is set when the job's first process exited on its own.
	ExitCode *int
	Reason   string
	Usage    events.Usage
	Started  time.Time
	Stopped  time.Time
}

// Executor prepares jobs. Its methods may be called concurrently for
// different jobs.
type Executor interface {
	// Prepare makes the job's directories and whatever else it needs to
	// run, and returns its handle. The writable space it makes is bounded
	// by Spec.DiskBytes where the executor can bound it.
	Prepare(ctx context.Context, spec Spec) (Job, error)
}

// Isolator is implemented by executors that say how they keep a job apart
// from the node and from other jobs. RUN announces the node with Isolation
// and records IsolationOf in every RunStarted, for the hold record.
type Isolator interface {
	// Isolation is the weakest isolation the executor gives any job: what
	// its node announces.
	Isolation() events.Isolation
	// IsolationOf is the isolation the job of spec runs under.
	IsolationOf(spec Spec) events.Isolation
}

// Isolation is the weakest isolation e gives any job; an executor that is
// not an Isolator is taken to isolate nothing.
func Isolation(e Executor) events.Isolation {
	if i, ok := e.(Isolator); ok {
		return i.Isolation()
	}
	return events.IsolationNone
}

// IsolationOf is the isolation e runs the job of spec under; an executor
// that is not an Isolator is taken to isolate nothing.
func IsolationOf(e Executor, spec Spec) events.Isolation {
	if i, ok := e.(Isolator); ok {
		return i.IsolationOf(spec)
	}
	return events.IsolationNone
}

// DiskUsage is what a job's writable space holds against its bound, and
// whether it is full.
type DiskUsage interface {
	Usage() (used, bound int64, full bool, err error)
}

// CheckDisk makes a failed job that filled its writable space
// DiskExceeded: it got ENOSPC or EDQUOT at its bound, and that is the
// likely reason it failed. A job that succeeded did so anyway, and one
// stopped for its limit, memory or a cancel keeps that outcome.
func CheckDisk(res *Result, ws DiskUsage, log *slog.Logger) {
	if res.Outcome != events.Failed {
		return
	}
	used, bound, full, err := ws.Usage()
	if err != nil {
		log.Warn("read the job's disk usage", "err", err)
		return
	}
	if !full {
		return
	}
	res.Outcome = events.DiskExceeded
	res.Reason = fmt.Sprintf("disk full: /out and /tmp hold %d of the job's %d-byte disk bound (request.disk); %s",
		used, bound, res.Reason)
}
