//go:build linux

// Package workspace makes a job's place on a node, shared by the sandbox and
// container executors: a directory with data/ on the node's disk for the
// staged input, and a writable space of the job's disk bound holding out/,
// tmp/ and log/. The writable space is a subvolume of the node's job disk
// (see Disk) with a quota of the bound, or, where the node has no such
// disk, a tmpfs of the bound (whose pages count against the job's memory).
// It also hands out the per-job uids.
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
	// RW is the bounded writable space; Out, Tmp and Log are in it.
	RW, Out, Tmp, Log string

	// space is the subvolume bound on RW from Attach to Remove, if any:
	// then Mount and Clear leave RW mounted.
	space *space
	// bound is the size of the writable space in force.
	bound int64
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

// Attach gives a created workspace a subvolume of disk as its writable
// space, bound on RW for as long as the workspace lives: Mount then bounds
// it with a quota instead of mounting a tmpfs, and Clear empties it.
func (d *Dir) Attach(disk *Disk) error {
	s, err := disk.newSpace()
	if err != nil {
		return fmt.Errorf("make writable space: %w", err)
	}
	if err := unix.Mount(s.path(), d.RW, "", unix.MS_BIND, ""); err != nil {
		return errors.Join(fmt.Errorf("mount writable space: %w", err), s.destroy())
	}
	d.space = s
	return nil
}

// Mount gives a created or cleared workspace a new, empty writable space of
// diskBytes on RW holding out/ and tmp/, which belong to uid: its
// subvolume (Attach) with a quota of diskBytes, or else a new tmpfs of
// diskBytes. log/ is made by Stdio, for a job whose output goes to files:
// RUN's goes through pipes, and a directory made and removed per job on
// the job disk would be for nothing.
func (d *Dir) Mount(diskBytes int64, uid int) error {
	if d.space != nil {
		if err := d.space.limit(diskBytes); err != nil {
			return fmt.Errorf("bound writable space: %w", err)
		}
	} else {
		inodes := min(max(diskBytes/4096, 1024), 1<<20)
		opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755", diskBytes, inodes)
		if err := unix.Mount("e31-job", d.RW, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount writable space: %w", err)
		}
	}
	d.bound = diskBytes
	for _, x := range []struct {
		path  string
		mode  uint32
		owned bool
	}{{d.Out, 0o755, true}, {d.Tmp, 0o1777, true}} {
		// The space is empty and ours alone: plain syscalls, no need for
		// the os package's care.
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

// Remove unmounts the writable space and deletes the workspace, its
// subvolume included.
func (d *Dir) Remove() error {
	if err := d.unmount(); err != nil {
		return err
	}
	if d.space != nil {
		if err := d.space.destroy(); err != nil {
			return fmt.Errorf("remove writable space: %w", err)
		}
		d.space = nil
	}
	// What is left is data/ and the directories: the rest went with
	// the writable space. Most jobs' data directory is empty or gone by
	// now; try the cheap way first.
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
// directories for the next job: it empties the writable space (a tmpfs is
// unmounted; a subvolume is emptied, and what it held is accounted anew by
// the file system's next transaction, which a write over the next job's
// quota waits for) and empties data/, giving it back mode 0755 and root as
// its owner. A Dir that was never mounted is only emptied. It fails if the
// directories are gone.
func (d *Dir) Clear() error {
	if d.space != nil {
		// Only root can write in RW itself: what is there is out/, tmp/
		// and, if Stdio made it, log/, with whatever the job put in them.
		// Most jobs leave out/ and tmp/ empty: try the cheap way first.
		for _, dir := range []string{d.Out, d.Tmp, d.Log} {
			if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
				if err := os.RemoveAll(dir); err != nil {
					return fmt.Errorf("clear writable space: %w", err)
				}
			}
		}
	} else if err := d.unmount(); err != nil {
		return err
	}
	d.bound = 0
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
	// to it: it is covered from Mount to Clear, or by the subvolume.)
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

// Usage is what the writable space holds and its bound, in bytes; full
// says the job filled it: what is left is less than a write could need
// (1 MiB, or 1/64 of the bound if more). A subvolume's usage is the file
// system's account of it, brought up to date first (a btrfs transaction:
// for the jobs that failed, not for every job).
func (d *Dir) Usage() (used, bound int64, full bool, err error) {
	if d.bound == 0 {
		return 0, 0, false, errors.New("workspace usage: no writable space mounted")
	}
	bound = d.bound
	if d.space != nil {
		if err := unix.Syncfs(d.space.fd); err != nil {
			return 0, bound, false, fmt.Errorf("workspace usage: sync: %w", err)
		}
		if used, err = d.space.used(); err != nil {
			return 0, bound, false, fmt.Errorf("workspace usage: %w", err)
		}
	} else {
		var st unix.Statfs_t
		if err := unix.Statfs(d.RW, &st); err != nil {
			return 0, bound, false, fmt.Errorf("workspace usage: %w", err)
		}
		used = int64(st.Blocks-st.Bfree) * st.Bsize
	}
	return used, bound, bound-used < max(1<<20, bound/64), nil
}

// Quota says whether the writable space is a subvolume of the node's job
// disk bounded by a quota, rather than a tmpfs.
func (d *Dir) Quota() bool { return d.space != nil }

// emptyDir removes everything in dir, which may be missing.
func emptyDir(dir string) error {
	// Nearly always empty (a job that staged no data): one getdents says
	// so, without the os package's directory file (an open, four fcntls,
	// two getdents and a close).
	if empty, err := isEmptyDir(dir); err != nil || empty {
		return err
	}
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

// DataEmpty reports whether nothing is staged in Data.
func (d *Dir) DataEmpty() (bool, error) { return isEmptyDir(d.Data) }

// isEmptyDir reports whether dir holds nothing; a missing dir is empty.
func isEmptyDir(dir string) (bool, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	// The first batch has "." and ".." and, if there is any, at least one
	// other entry: a buffer this size holds many.
	var buf [4096]byte
	for {
		n, err := unix.Getdents(fd, buf[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read %s: %w", dir, err)
		}
		_, count, _ := unix.ParseDirent(buf[:n], 1, nil)
		return count == 0, nil
	}
}

// Stdio opens the job's stdin (/dev/null) and its stdout and stderr files in
// Log, which it makes.
func (d *Dir) Stdio() ([]*os.File, error) {
	if err := unix.Mkdir(d.Log, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("make workspace: mkdir %s: %w", d.Log, err)
	}
	// Whatever the umask.
	if err := unix.Chmod(d.Log, 0o755); err != nil {
		return nil, fmt.Errorf("make workspace: chmod %s: %w", d.Log, err)
	}
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
