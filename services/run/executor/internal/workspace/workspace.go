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
// a node agent that died) is removed first. It is Create and then Mount.
func Make(root, name string, diskBytes int64, uid int) (*Dir, error) {
	d, err := Create(root, name)
	if err != nil {
		return d, err
	}
	return d, d.Mount(diskBytes, uid)
}

// Create makes the directories of the workspace name under root, without
// its writable space: Mount adds that for a job, Clear takes it away again,
// and the directories can serve one job after another. A stale workspace of
// the same name is removed first.
func Create(root, name string) (*Dir, error) {
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
	return d, nil
}

// Mount gives a created or cleared workspace a new, empty writable space: a
// tmpfs of diskBytes on RW holding out/ and tmp/, which belong to uid, and
// log/.
func (d *Dir) Mount(diskBytes int64, uid int) error {
	inodes := min(max(diskBytes/4096, 1024), 1<<20)
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755", diskBytes, inodes)
	if err := unix.Mount("e31-job", d.RW, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount writable space: %w", err)
	}
	for _, x := range []struct {
		path  string
		mode  uint32
		owned bool
	}{{d.Out, 0o755, true}, {d.Tmp, 0o1777, true}, {d.Log, 0o755, false}} {
		// The tmpfs is new and ours alone: plain syscalls, no need for the
		// os package's care.
		if err := unix.Mkdir(x.path, 0o700); err != nil {
			return fmt.Errorf("make workspace: mkdir %s: %w", x.path, err)
		}
		if x.owned {
			if err := unix.Chown(x.path, uid, uid); err != nil {
				return fmt.Errorf("make workspace: chown %s: %w", x.path, err)
			}
		}
		if err := unix.Chmod(x.path, x.mode); err != nil {
			return fmt.Errorf("make workspace: chmod %s: %w", x.path, err)
		}
	}
	return nil
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
	if err := d.unmount(); err != nil {
		return err
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

// Clear takes a job's traces out of the workspace and keeps its
// directories for the next job: it unmounts the writable space (out/, tmp/
// and log/ go with it) and empties data/, giving it back mode 0755 and root
// as its owner. A Dir that was never mounted is only emptied. It fails if
// the directories are gone.
func (d *Dir) Clear() error {
	if err := d.unmount(); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(d.Data, &st); err != nil {
		return fmt.Errorf("clear workspace: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("clear workspace: %s is not a directory", d.Data)
	}
	if err := emptyDir(d.Data); err != nil {
		return fmt.Errorf("clear data: %w", err)
	}
	if st.Mode != unix.S_IFDIR|0o755 || st.Uid != 0 || st.Gid != 0 {
		if err := unix.Chown(d.Data, 0, 0); err != nil {
			return fmt.Errorf("clear data: %w", err)
		}
		if err := unix.Chmod(d.Data, 0o755); err != nil {
			return fmt.Errorf("clear data: %w", err)
		}
	}
	// The mount point must be there for the next Mount. (Nothing writes
	// to it: it is covered from Mount to Clear, and not in use between.)
	if err := unix.Lstat(d.RW, &st); err != nil {
		return fmt.Errorf("clear workspace: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("clear workspace: %s is not a directory", d.RW)
	}
	return nil
}

func (d *Dir) unmount() error {
	if err := unix.Unmount(d.RW, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		if err := unix.Unmount(d.RW, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", d.RW, err)
		}
	}
	return nil
}

// emptyDir removes everything in dir, which may be missing.
func emptyDir(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return err
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
