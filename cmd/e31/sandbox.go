package main

import (
	"log/slog"

	"github.com/e31net/e31/services/run/executor"
)

// newSandbox returns the sandbox executor.
func newSandbox(root string, node nodeConfig, log *slog.Logger) (executor.Executor, error) {
	log.Warn("the sandbox executor is not wired in yet; using plain child processes", "node", node.Name)
	return executor.NewProcess(root)
}
