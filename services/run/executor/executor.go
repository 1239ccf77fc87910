// Package executor runs one job on a node and says how it stopped. An
// Executor is the only part of RUN that touches processes, so the plain child
// process of the walking skeleton and the real sandbox can be swapped.
package executor

import (
	"context"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// Spec is one job to execute.
type Spec struct {
	JobID   string
	Attempt int
	Command []string
	// Env is the declared environment; executors add E31_JOB_ID, E31_DATA and
	// E31_OUTPUT (the paths as the job sees them).
	Env   map[string]string
	Image string

	CPU         float64
	MemoryBytes int64
	DiskBytes   int64
	// Limit is the hard wall-clock limit. At Limit the job gets SIGTERM; Grace
	// later every process it has left gets SIGKILL.
	Limit time.Duration
	Grace time.Duration
}

// Workspace is a job's place on the node. RUN stages input into DataDir before
// Run and collects output from OutDir after it.
type Workspace struct {
	Spec    Spec
	Root    string
	DataDir string
	OutDir  string
	// Release removes everything Prepare made. RUN calls it once the output is
	// collected, on every path.
	Release func() error
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

// Executor runs jobs. Its methods may be called concurrently for different jobs.
type Executor interface {
	// Prepare makes the job's directories. The writable space it makes is
	// bounded by Spec.DiskBytes where the executor can bound it.
	Prepare(ctx context.Context, spec Spec) (*Workspace, error)
	// Run executes the job and returns only when no process of it is left.
	// Cancelling ctx stops it (SIGTERM, Grace, SIGKILL) with outcome Cancelled.
	// An error means the job could not be started at all.
	Run(ctx context.Context, ws *Workspace) (Result, error)
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
