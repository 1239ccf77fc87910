//go:build linux

package container

import (
	"fmt"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/executor/internal/workspace"
)

// defaultNodeDisk is Config.DiskBytes unless set (the sandbox's default:
// the two share the file system).
const defaultNodeDisk = 20 << 30

// openDisk gives the executor the node's job disk (see workspace.Disk), the
// one the sandbox executor over the same Root uses, or leaves e.disk nil,
// and says loudly why, where the node cannot make one: then every job's
// /out and /tmp is a tmpfs, whose pages count against the job's memory.
func (e *Executor) openDisk() {
	size := e.cfg.DiskBytes
	if size < 0 {
		e.log.Warn("NO DISK QUOTA (configured): containers' /out and /tmp are a tmpfs of their disk bound, whose pages count against their memory limit")
		return
	}
	if size == 0 {
		size = defaultNodeDisk
	}
	d, err := workspace.OpenDisk(e.cfg.Root, size)
	if err != nil {
		e.log.Error("NO DISK QUOTA: this node cannot make a file system with quotas for jobs (it needs btrfs, loop devices and mkfs.btrfs from btrfs-progs); "+
			"containers' /out and /tmp are a tmpfs of their disk bound instead, whose pages count against their memory limit", "root", e.cfg.Root, "err", err)
		return
	}
	e.disk = d
	e.log.Info("containers' /out and /tmp are on the node's disk: a subvolume of the job disk with a quota per job", "mount", d.Path, "size", d.Size)
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

// checkDisk makes a failed job that filled its writable space
// DiskExceeded, as the sandbox does: it got EDQUOT (ENOSPC in a tmpfs) at
// its bound, and that is the likely reason it failed. A job that succeeded
// did so anyway, and one stopped for its limit, memory or a cancel keeps
// that outcome.
func checkDisk(j *job, res *executor.Result) {
	if res.Outcome != events.Failed {
		return
	}
	used, bound, full, err := j.ws.Usage()
	if err != nil {
		j.log.Warn("read the job's disk usage", "err", err)
		return
	}
	if !full {
		return
	}
	res.Outcome = events.DiskExceeded
	res.Reason = fmt.Sprintf("disk full: /out and /tmp hold %d of the job's %d-byte disk bound (request.disk); %s",
		used, bound, res.Reason)
}
