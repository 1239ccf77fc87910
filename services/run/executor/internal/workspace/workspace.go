//go:build linux

// Package workspace makes a job's place on a node, shared by the sandbox and
// container executors: a directory with data/ on the node's disk for the
// staged input, and a tmpfs of the job's disk bound holding out/, tmp/ and
// log/, so that whatever the job writes is bounded and never reaches the
// node's disk. It also hands out the per-job uids.
package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Dir is one job's workspace.
type Dir struct {
	// Path is the workspace directory.
	Path string
	// Data is where RUN stages input; the job sees it read-only.
	Data string
	// RW is the bounded tmpfs; Out, Tmp and Log are in it.
	RW, Out, Tmp, Log string
}

// Make creates the workspace name under root: the tmpfs is diskBytes large,
// out/ and tmp/ belong to uid. A stale workspace of the same name (left by
// a node agent that died) is removed first.
func Make(root, name string, diskBytes int64, uid int) (*Dir, error) {
	p := filepath.Join(root, name)
	d := &Dir{Path: p, Data: filepath.Join(p, "data"), RW: filepath.Join(p, "rw")}
	d.Out, d.Tmp, d.Log = filepath.Join(d.RW, "out"), filepath.Join(d.RW, "tmp"), filepath.Join(d.RW, "log")
	if _, err := os.Lstat(p); err == nil {
		_ = unix.Unmount(d.RW, unix.MNT_DETACH)
		if err := os.RemoveAll(p); err != nil {
			return nil, fmt.Errorf("remove stale workspace %s: %w", p, err)
		}
	}
	for _, dir := range []string{p, d.Data, d.RW} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return d, fmt.Errorf("make workspace: %w", err)
		}
	}
	inodes := min(max(diskBytes/4096, 1024), 1<<20)
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755", diskBytes, inodes)
	if err := unix.Mount("e31-job", d.RW, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return d, fmt.Errorf("mount writable space: %w", err)
	}
	for _, x := range []struct {
		path  string
		mode  os.FileMode
		owned bool
	}{{d.Out, 0o755, true}, {d.Tmp, 0o1777, true}, {d.Log, 0o755, false}} {
		if err := os.Mkdir(x.path, 0o755); err != nil {
			return d, fmt.Errorf("make workspace: %w", err)
		}
		if err := os.Chmod(x.path, x.mode); err != nil {
			return d, fmt.Errorf("make workspace: %w", err)
		}
		if x.owned {
			if err := os.Chown(x.path, uid, uid); err != nil {
				return d, fmt.Errorf("make workspace: %w", err)
			}
		}
	}
	return d, nil
}

// RemoveStale removes every job workspace under root: at a node agent's
// start, any that exist were left by one that died. It returns the names
// removed.
func RemoveStale(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	var removed []string
	var errs []error
	for _, ent := range ents {
		if !ent.IsDir() || !strings.HasPrefix(ent.Name(), "job-") {
			continue
		}
		p := filepath.Join(root, ent.Name())
		_ = unix.Unmount(filepath.Join(p, "rw"), unix.MNT_DETACH)
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, ent.Name())
	}
	return removed, errors.Join(errs...)
}

// Remove unmounts the tmpfs and deletes the workspace.
func (d *Dir) Remove() error {
	if err := unix.Unmount(d.RW, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		if err := unix.Unmount(d.RW, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", d.RW, err)
		}
	}
	// Only the data is on disk: the rest was in the tmpfs. Most jobs'
	// data directory is empty or gone by now; try the cheap way first.
	if err := unix.Rmdir(d.Data); err != nil && !errors.Is(err, unix.ENOENT) {
		if err := os.RemoveAll(d.Data); err != nil {
			return fmt.Errorf("remove data: %w", err)
		}
	}
	for _, dir := range []string{d.RW, d.Path} {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove workspace: %w", err)
		}
	}
	return nil
}

// Stdio opens the job's stdin (/dev/null) and its stdout and stderr files in
// Log.
func (d *Dir) Stdio() ([]*os.File, error) {
	in, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	files := []*os.File{in}
	for _, n := range []string{"stdout", "stderr"} {
		f, err := os.OpenFile(filepath.Join(d.Log, n), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("open %s: %w", n, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// LogPaths returns the stdout and stderr files of the workspace at path.
func LogPaths(path string) (stdout, stderr string) {
	dir := filepath.Join(path, "rw", "log")
	return filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
}

// Name is a job attempt's workspace (and cgroup) name: its id made safe for
// a path, and the attempt.
func Name(id string, attempt int) string {
	var b strings.Builder
	for _, r := range id {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		} else {
			fmt.Fprintf(&b, "%%%02x", r)
		}
	}
	return "job-" + b.String() + "-" + strconv.Itoa(attempt)
}

// uidsInUse are the job uids taken in this process, by any executor: two
// executors with overlapping uid ranges (several nodes in one `e31 dev`)
// still never give one uid to two jobs. Node agents in different processes
// on one host need disjoint ranges.
var uidsInUse = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// TakeUID reserves a free uid in [base, base+count).
func TakeUID(base, count int) (int, bool) {
	uidsInUse.Lock()
	defer uidsInUse.Unlock()
	for uid := base; uid < base+count; uid++ {
		if !uidsInUse.m[uid] {
			uidsInUse.m[uid] = true
			return uid, true
		}
	}
	return 0, false
}

// FreeUID returns a uid taken with TakeUID.
func FreeUID(uid int) {
	uidsInUse.Lock()
	defer uidsInUse.Unlock()
	delete(uidsInUse.m, uid)
}
