package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/executor/container"
	"github.com/e31net/e31/services/run/executor/sandbox"
)

// Executor kinds a node can run jobs with.
const (
	ExecSandbox = "sandbox" // isolated: namespaces, pivot_root, cgroups (needs root)
	ExecProcess = "process" // a plain child process: NOT isolated; the operator's explicit choice
	ExecAuto    = "auto"    // the sandbox where the machine allows it, else refuse to start
)

// ErrNoIsolation is returned when a node was to isolate its jobs (executor
// sandbox or auto) and this host cannot: the node refuses to start rather
// than run jobs that see the node. Its message says what to do.
var ErrNoIsolation = errors.New("run: this host cannot isolate jobs")

// noIsolation is ErrNoIsolation with why, and the operator's two ways on.
func noIsolation(why error) error {
	return fmt.Errorf("%w (%v): run the node as root, which the sandbox needs, "+
		"or pass --executor process to run jobs as plain child processes that see the node's files and network "+
		"(the node then announces isolation \"none\", and only jobs that may run unisolated are placed on it)", ErrNoIsolation, why)
}

// CheckExecutor makes the checks of OpenExecutor that change nothing on the
// host, so that a node can refuse to start before it starts anything: the
// kind is known, and a host that must isolate jobs can (the sandbox's first
// check: root). A nil error does not promise that OpenExecutor succeeds.
func CheckExecutor(kind string) error {
	switch kind {
	case ExecProcess:
		return nil
	case "", ExecAuto, ExecSandbox:
		if err := sandbox.Check(); err != nil {
			return noIsolation(err)
		}
		return nil
	}
	return fmt.Errorf("run: executor %q: expected sandbox, process or auto", kind)
}

// OpenExecutor returns the executor of the given kind, making workspaces
// under root. Only kind ExecProcess runs jobs unisolated; sandbox and auto
// (the same: auto no longer falls back) return an error wrapping
// ErrNoIsolation where the sandbox cannot run. diskBytes is the node's disk
// for jobs (--node-disk): the sandbox keeps their /out and /tmp in a file
// system of that size with a quota per job (0: its default).
func OpenExecutor(kind, root string, diskBytes int64, log *slog.Logger) (executor.Executor, error) {
	return OpenExecutorWith(kind, root, diskBytes, log, nil)
}

// OpenExecutorWith is OpenExecutor whose container executor refuses the
// images that images does not allow a job's submitter (the operator's
// policy, which SUBMIT enforces first).
func OpenExecutorWith(kind, root string, diskBytes int64, log *slog.Logger, images container.Images) (executor.Executor, error) {
	if err := CheckExecutor(kind); err != nil {
		return nil, err
	}
	if kind == ExecProcess {
		log.Warn("running jobs as plain child processes (--executor process): they are NOT isolated from each other or the node; the node announces isolation none")
		return executor.NewProcess(root)
	}
	return openIsolated(root, diskBytes, log, images)
}

// openIsolated returns the sandbox executor, with the container executor for
// jobs that name an image when a Docker engine answers. A host that cannot
// sandbox gets an error wrapping ErrNoIsolation: never jobs unisolated.
func openIsolated(root string, diskBytes int64, log *slog.Logger, images container.Images) (executor.Executor, error) {
	sb, err := sandbox.New(sandbox.Config{Root: root, DiskBytes: diskBytes, Logger: log})
	if err != nil {
		if errors.Is(err, sandbox.ErrNotSupported) {
			return nil, noIsolation(err)
		}
		return nil, fmt.Errorf("run: %w", err)
	}
	var containers executor.Executor
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ce, err := container.New(ctx, container.Config{Root: root, DiskBytes: diskBytes, UIDBase: 3000000, Logger: log, Images: images}); err == nil {
		containers = ce
		log.Info("jobs that name an image run as containers")
	} else {
		log.Info("no container engine: jobs that name an image are not held here", "why", err)
	}
	return executor.NewByImage(sb, containers), nil
}
