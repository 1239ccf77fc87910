package run

import (
	"fmt"
	"log/slog"

	"github.com/e31net/e31/services/run/executor"
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
	switch kind {
	case ExecProcess:
		log.Warn("running jobs as plain child processes: they are NOT isolated from each other or the node")
		return executor.NewProcess(root)
	case "", ExecAuto, ExecSandbox:
		return openSandbox(kind, root, log)
	}
	return nil, fmt.Errorf("run: executor %q: expected sandbox, process or auto", kind)
}
