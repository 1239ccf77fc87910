package run

import (
	"log/slog"

	"github.com/e31net/e31/services/run/executor"
)

// openSandbox returns the sandbox executor.
func openSandbox(kind, root string, log *slog.Logger) (executor.Executor, error) {
	log.Warn("the sandbox executor is not wired in yet; using plain child processes")
	return executor.NewProcess(root)
}
