//go:build linux

package workspace

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openDisk opens a job disk under a temporary root, or skips where the
// machine cannot make one (not root, no btrfs-progs).
func openDisk(t *testing.T, root string) *Disk {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a job disk needs root (loop devices, mounts)")
	}
	d, err := OpenDisk(root, 512<<20)
	if err != nil {
		t.Fatalf("open job disk: %v", err)
	}
	return d
}

func fsType(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type
}

// TestDiskMadeOnceAndReused: the image is made by the first OpenDisk and
// reused by the next; Close unmounts it and leaves the image.
func TestDiskMadeOnceAndReused(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d := openDisk(t, root)
	if !d.Made || fsType(t, d.Path) != unix.BTRFS_SUPER_MAGIC {
		t.Fatalf("made %v, fs %#x: want a new btrfs", d.Made, fsType(t, d.Path))
	}
	shared := openDisk(t, root)
	if shared != d {
		t.Error("a second OpenDisk of the root in the process got another Disk")
	}
	for _, x := range []*Disk{shared, d} {
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if fsType(t, d.Path) == unix.BTRFS_SUPER_MAGIC {
		t.Fatal("still mounted after the last Close")
	}
	again := openDisk(t, root)
	if again.Made || again.Grown || again.Size != 512<<20 {
		t.Errorf("made %v, grown %v, size %d: want the image reused", again.Made, again.Grown, again.Size)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	// The node's disk raised: the image and its file system grow.
	bigger, err := OpenDisk(root, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer bigger.Close()
	var st unix.Statfs_t
	if err := unix.Statfs(bigger.Path, &st); err != nil {
		t.Fatal(err)
	}
	if !bigger.Grown || bigger.Size != 1<<30 || int64(st.Blocks)*st.Bsize < 900<<20 {
		t.Errorf("grown %v, size %d, file system of %d bytes: want 1 GiB", bigger.Grown, bigger.Size, int64(st.Blocks)*st.Bsize)
	}
}

// TestSpacesApart: two workspaces' spaces, each with its own bound; one
// filled does not take from the other; Clear empties one for the next job,
// which gets its whole bound; Remove deletes it, and its qgroup goes too.
func TestSpacesApart(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	disk := openDisk(t, root)
	defer disk.Close()
	var dirs []*Dir
	for _, name := range []string{"job-a", "job-b"} {
		d, err := Create(root, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Attach(disk); err != nil {
			t.Fatal(err)
		}
		if err := d.Mount(8<<20, 12345); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	a, b := dirs[0], dirs[1]
	if n, err := fill(filepath.Join(a.Out, "big"), 16<<20); !errors.Is(err, unix.EDQUOT) || n > 8<<20 {
		t.Errorf("16 MiB into an 8 MiB space: %d bytes, %v; want EDQUOT", n, err)
	}
	if _, err := fill(filepath.Join(b.Tmp, "some"), 6<<20); err != nil {
		t.Errorf("6 MiB into the other space, bound at 8: %v", err)
	}
	for _, c := range []struct {
		d        *Dir
		min, max int64
		full     bool
	}{{a, 7 << 20, 8 << 20, true}, {b, 6 << 20, 7 << 20, false}} {
		used, bound, full, err := c.d.Usage()
		if err != nil || used < c.min || used > c.max || bound != 8<<20 || full != c.full {
			t.Errorf("%s: used %d of %d, full %v (%v); want %d to %d, full %v", c.d.Path, used, bound, full, err, c.min, c.max, c.full)
		}
	}
	if err := a.Clear(); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(a.RW); err != nil || len(ents) != 0 {
		t.Errorf("cleared space holds %v (%v)", ents, err)
	}
	if err := a.Mount(8<<20, 12346); err != nil {
		t.Fatal(err)
	}
	if _, err := fill(filepath.Join(a.Out, "again"), 7<<20); err != nil {
		t.Errorf("7 MiB into a cleared space bound at 8: %v", err)
	}
	id := a.space.id
	for _, d := range dirs {
		if err := d.Remove(); err != nil {
			t.Fatal(err)
		}
	}
	qgroup := filepath.Join(disk.qgroups, "0_"+strconv.FormatUint(id, 10))
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The kernel drops a deleted subvolume in the background (its
		// cleaner thread, which BTRFS_IOC_SYNC wakes); the disk removes
		// its qgroup when it next can.
		_ = ioctl(disk.fd, 0x9408, nil) // BTRFS_IOC_SYNC, _IO(0x94, 8)
		disks.Lock()
		disk.sweep()
		disks.Unlock()
		if _, err := os.Stat(qgroup); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("qgroup of a removed space still there: %s", qgroup)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDiskLeftMounted: a node agent that died left its disk mounted with a
// space in it; the next OpenDisk reuses the mount and removes the space.
func TestDiskLeftMounted(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	disk := openDisk(t, root)
	s, err := disk.newSpace()
	if err != nil {
		t.Fatal(err)
	}
	// Die: forget the disk without unmounting it.
	unix.Close(s.fd)
	disks.Lock()
	delete(disks.m, root)
	unix.Close(disk.fd)
	disks.Unlock()

	next := openDisk(t, root)
	defer next.Close()
	if next == disk || next.Made {
		t.Fatal("the next OpenDisk did not reuse the mounted disk")
	}
	if _, err := os.Lstat(s.path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale space %s still there: %v", s.path(), err)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Count(mounts, []byte(" "+next.Path+" ")) != 1 {
		t.Errorf("want the disk mounted once:\n%s", mounts)
	}
}

// fill writes n bytes to path, a MiB at a time, and returns how many it
// wrote and the error that stopped it.
func fill(path string, n int) (int, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	buf := []byte(strings.Repeat("x", 1<<20))
	written := 0
	for written < n {
		k, err := f.Write(buf)
		written += k
		if err != nil {
			f.Close()
			return written, err
		}
	}
	return written, f.Close()
}
