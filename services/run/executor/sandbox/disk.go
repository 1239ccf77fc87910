//go:build linux

package sandbox

import (
	"fmt"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/executor/internal/workspace"
)

// defaultNodeDisk is Config.DiskBytes unless set.
const defaultNodeDisk = 20 << 30

// openDisk gives the executor the file system of its jobs' writable space
// (see workspace.Disk), or leaves e.disk nil, and says loudly why, where the
// node cannot make one: then every job's /out and /tmp is a tmpfs, whose
// pages count against the job's memory limit.
func (e *Executor) openDisk() {
	size := e.cfg.DiskBytes
	if size < 0 {
		e.log.Warn("NO DISK QUOTA (configured): jobs' /out and /tmp are a tmpfs of their disk bound, whose pages count against their memory limit")
		return
	}
	if size == 0 {
		size = defaultNodeDisk
	}
	d, err := workspace.OpenDisk(e.cfg.Root, size)
	if err != nil {
		e.log.Error("NO DISK QUOTA: this node cannot make a file system with quotas for jobs (it needs btrfs, loop devices and mkfs.btrfs from btrfs-progs); "+
			"jobs' /out and /tmp are a tmpfs of their disk bound instead, whose pages count against their memory limit, "+
			"so a job that writes more than its memory request is killed as out_of_memory", "root", e.cfg.Root, "err", err)
		return
	}
	e.disk = d
	how := "reused"
	switch {
	case d.Made:
		how = "made"
	case d.Grown:
		how = "grown to the node's disk"
	}
	e.log.Info("jobs' /out and /tmp are on the node's disk: a btrfs file system with a quota per job, loop-mounted from an image ("+how+" now; the work directory's own file system has no quotas here)",
		"image", d.Image, "size", d.Size, "mount", d.Path)
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

// checkDisk makes a failed job that filled its writable space
// DiskExceeded: it got ENOSPC or EDQUOT at its bound, and that is the likely
// reason it failed. A job that succeeded did so anyway, and one stopped for
// its limit, memory or a cancel keeps that outcome.
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
