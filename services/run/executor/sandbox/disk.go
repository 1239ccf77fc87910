//go:build linux

package sandbox

import (
	"fmt"

	"github.com/e31net/e31/services/run/executor/internal/workspace"
)

// openDisk gives the executor the node's job disk (see
// workspace.OpenNodeDisk), or leaves e.disk nil where there is none.
func (e *Executor) openDisk() {
	e.disk = workspace.OpenNodeDisk(e.cfg.Root, e.cfg.DiskBytes, "jobs'", e.log)
}

// closeDisk gives the executor's file system back (see workspace.Disk.Close).
func (e *Executor) closeDisk() error {
	if e.disk == nil {
		return nil
	}
	if err := e.disk.Close(); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	return nil
}
