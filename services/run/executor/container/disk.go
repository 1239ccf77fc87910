//go:build linux

package container

import (
	"fmt"

	"github.com/e31net/e31/services/run/executor/internal/workspace"
)

// openDisk gives the executor the node's job disk (see
// workspace.OpenNodeDisk), or leaves e.disk nil where there is none.
func (e *Executor) openDisk() {
	e.disk = workspace.OpenNodeDisk(e.cfg.Root, e.cfg.DiskBytes, "containers'", e.log)
}

// makeWorkspace makes a job's workspace, its writable space a subvolume of
// the job disk bound at diskBytes (bind-mounted into the container as /out
// and /tmp like any directory), or a tmpfs where the node has no job disk.
// A subvolume is made per job, not kept per slot as the sandbox does: a
// container costs far more to start than a subvolume does.
func (e *Executor) makeWorkspace(name string, diskBytes int64, uid int) (*workspace.Dir, error) {
	if e.disk == nil {
		return workspace.Make(e.cfg.Root, name, diskBytes, uid)
	}
	d, err := workspace.Create(e.cfg.Root, name)
	if err != nil {
		return d, err
	}
	if err := d.Attach(e.disk); err != nil {
		return d, err
	}
	return d, d.Mount(diskBytes, uid)
}

// Close gives back the node's job disk (see workspace.Disk.Close): the
// last of the executors sharing it unmounts it, once the workspaces still
// attached are removed. Jobs running are not stopped.
func (e *Executor) Close() error {
	e.mu.Lock()
	d := e.disk
	e.disk = nil
	e.mu.Unlock()
	if d == nil {
		return nil
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("container: %w", err)
	}
	return nil
}
