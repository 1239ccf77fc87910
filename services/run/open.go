package run

import (
	"fmt"
	"log/slog"

	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/executor/container"
)

// Executor kinds a node can run jobs with.
const (
	ExecSandbox = "sandbox" // isolated: namespaces, pivot_root, cgroups (needs root)
	ExecProcess = "process" // a plain child process: NOT isolated
	ExecAuto    = "auto"    // the sandbox where the machine allows it, else refuse
)

// OpenExecutor returns the executor of the given kind, making workspaces
// under root.
func OpenExecutor(kind, root string, log *slog.Logger) (executor.Executor, error) {
	return OpenExecutorWith(kind, root, log, nil)
}

// OpenExecutorWith is OpenExecutor whose container executor refuses the
// images that images does not allow a job's submitter (the operator's
// policy, which SUBMIT enforces first).
func OpenExecutorWith(kind, root string, log *slog.Logger, images container.Images) (executor.Executor, error) {
	switch kind {
	case ExecProcess:
		log.Warn("running jobs as plain child processes: they are NOT isolated from each other or the node")
		return executor.NewProcess(root)
	case "", ExecAuto, ExecSandbox:
		return openSandbox(kind, root, log, images)
	}
	return nil, fmt.Errorf("run: executor %q: expected sandbox, process or auto", kind)
}
