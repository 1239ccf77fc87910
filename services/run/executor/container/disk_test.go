//go:build linux

package container

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// A container's /out and /tmp are on the node's disk (a subvolume of the
// job disk with a quota), as the sandbox's are: what a job writes counts
// against its disk bound, not its memory.

// TestContainerWriteIsNotMemory: a job with 128 MiB of memory and 1 GiB of
// disk writes 300 MB into /out and succeeds; in the tmpfs the container
// executor used before, the pages counted against the memory cgroup and it
// was killed as out of memory. Its output is there for RUN to collect.
func TestContainerWriteIsNotMemory(t *testing.T) {
	t.Parallel()
	e := newExecutor(t)
	if e.disk == nil {
		t.Fatal("the executor has no job disk: btrfs, loop devices and mkfs.btrfs are needed (see the executor's log)")
	}
	s := spec("c-big-write", "write", "300")
	s.MemoryBytes, s.DiskBytes, s.Limit = 128<<20, 1<<30, time.Minute
	r := run(t, context.Background(), e, s, nil)
	if r.res.Outcome != events.Succeeded {
		t.Fatalf("outcome %s (%s), want succeeded", r.res.Outcome, r.res.Reason)
	}
	fi, err := os.Stat(filepath.Join(r.ws.Dirs().OutDir, "big"))
	if err != nil || fi.Size() != 300<<20 {
		t.Errorf("output: %v, %v; want 300 MiB", fi, err)
	}
}

// TestContainerDiskExceeded: a job writes past its 16 MiB bound, gets
// EDQUOT and exits 3 (the probe's exit on a failed write; what it prints
// about it is lost here, since the log kept in the workspace counts against
// the same full bound, and TestLimits checks the error the job sees): its outcome is disk_exceeded, with a reason naming
// the bound and the exit, and what it wrote is still in /out to be returned
// (partial). A job that fails with room to spare has failed, no more.
func TestContainerDiskExceeded(t *testing.T) {
	t.Parallel()
	e := newExecutor(t)
	if e.disk == nil {
		t.Fatal("the executor has no job disk: btrfs, loop devices and mkfs.btrfs are needed (see the executor's log)")
	}
	s := spec("c-too-big", "write", "64")
	s.DiskBytes = 16 << 20
	r := run(t, context.Background(), e, s, nil)
	if r.res.Outcome != events.DiskExceeded {
		t.Fatalf("outcome %s (%s), want disk_exceeded", r.res.Outcome, r.res.Reason)
	}
	if !strings.Contains(r.res.Reason, "16777216-byte disk bound") || !strings.Contains(r.res.Reason, "exited with code 3") {
		t.Errorf("reason %q does not name the bound and the exit", r.res.Reason)
	}
	if b, err := os.ReadFile(filepath.Join(r.ws.Dirs().OutDir, "begun")); err != nil || string(b) != "begun\n" {
		t.Errorf("partial output begun: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(r.ws.Dirs().OutDir, "big")); err != nil || fi.Size() == 0 || fi.Size() > 16<<20 {
		t.Errorf("partial output big: %v %v, want some and at most 16 MiB", fi, err)
	}

	s = spec("c-fails", "exit")
	s.DiskBytes = 16 << 20
	r = run(t, context.Background(), e, s, nil)
	if r.res.Outcome != events.Failed {
		t.Errorf("a job that failed with room to spare: outcome %s (%s), want failed", r.res.Outcome, r.res.Reason)
	}
}
