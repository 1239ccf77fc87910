//go:build linux

package workspace

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A snapshot is a read-only copy of a job's writable space, made in one
// btrfs transaction: every file as it was at that moment, sharing its
// extents with the space (nothing is copied), so that a job's checkpoint
// can be uploaded from it for as long as that takes while the job goes on
// writing. It is a subvolume of the node's job disk beside the spaces, of
// its own qgroup without a limit: it counts against no job's disk bound.

const (
	iocSnapCreateV2 = 0x50009417 // _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)
	subvolRDOnly    = 1 << 1     // BTRFS_SUBVOL_RDONLY
	subvolNameMax   = 4039       // BTRFS_SUBVOL_NAME_MAX
)

// volArgsV2 is struct btrfs_ioctl_vol_args_v2 (4096 bytes): the source's
// fd, the flags and the new subvolume's name; the unions unused.
type volArgsV2 struct {
	fd      int64
	transid uint64
	flags   uint64
	_       [4]uint64
	name    [subvolNameMax + 1]byte
}

// ErrNoSnapshot is returned by Snapshot where the writable space is a
// tmpfs: it has no snapshots, and a checkpoint is uploaded live instead.
var ErrNoSnapshot = errors.New("workspace: the writable space is not on the job disk, it has no snapshots")

// Snapshot is one read-only snapshot of a writable space.
type Snapshot struct {
	// Out is the snapshot's out/: the job's /out as it was.
	Out  string
	disk *Disk
	name string
	id   uint64
}

// Flush writes what the job has written so far to the job disk. A
// snapshot writes out the space's dirty pages before it is taken: flushed
// first, while the job runs, they no longer lengthen the moment the job is
// stopped for the snapshot (a second after a job wrote a GiB, that moment
// is the GiB's writeback, not milliseconds).
func (d *Dir) Flush() error {
	if d.space == nil {
		return ErrNoSnapshot
	}
	if err := unix.Syncfs(d.space.fd); err != nil {
		return fmt.Errorf("flush writable space: %w", err)
	}
	return nil
}

// Snapshot takes a read-only snapshot of the writable space. The caller
// stops the job's processes around it (a snapshot is of one moment, and a
// moment when nothing is half-written is the job's to choose only by
// write-then-rename) and removes it once done.
func (d *Dir) Snapshot() (*Snapshot, error) {
	s := d.space
	if s == nil {
		return nil, ErrNoSnapshot
	}
	disks.Lock()
	if s.disk.fd < 0 {
		disks.Unlock()
		return nil, errors.New("job disk is closed")
	}
	s.disk.refs++
	disks.Unlock()
	snap := &Snapshot{disk: s.disk, name: "snap-" + s.name + "-" + strconv.FormatInt(s.disk.seq.Add(1), 10)}
	a := &volArgsV2{fd: int64(s.fd), flags: subvolRDOnly}
	copy(a.name[:], snap.name)
	if err := ioctl(s.disk.fd, iocSnapCreateV2, unsafe.Pointer(a)); err != nil {
		snap.unref()
		return nil, fmt.Errorf("snapshot writable space %s: %w", s.name, err)
	}
	fd, err := unix.Openat(s.disk.fd, snap.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err == nil {
		snap.id, err = subvolID(fd)
		unix.Close(fd)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open snapshot: %w", err), snap.Remove())
	}
	snap.Out = filepath.Join(s.disk.Path, snap.name, "out")
	return snap, nil
}

// Remove deletes the snapshot. What it shared with the space stays; what
// only it held is freed in the background.
func (s *Snapshot) Remove() error {
	err := subvolDestroy(s.disk.fd, s.name)
	disks.Lock()
	if err == nil && s.id != 0 {
		s.disk.stale = append(s.disk.stale, s.id)
		s.disk.sweep()
	}
	s.disk.unref()
	disks.Unlock()
	if err != nil {
		return fmt.Errorf("remove snapshot: %w", err)
	}
	return nil
}

func (s *Snapshot) unref() {
	disks.Lock()
	s.disk.unref()
	disks.Unlock()
}
