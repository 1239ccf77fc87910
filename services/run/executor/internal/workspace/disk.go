//go:build linux

package workspace

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Disk is the file system that holds jobs' writable space on the node's
// disk: a btrfs file system with quotas (qgroups) on, loop-mounted from an
// image file under the work directory. Each workspace attached to it gets a
// subvolume of its own, whose qgroup limit is the job's disk bound.
//
// Why an image and not the work directory's own file system: this kernel
// has no XFS quota and no ext4 quota format, btrfs is the one file system
// with per-directory-tree quotas that works here; and a file system of the
// node's declared disk alone keeps jobs from filling the node's own disk
// and keeps the node's paths out of a job's mount table (a subvolume shows
// its path from the file system's top there, which is "/<n>").
//
// Making a subvolume costs a btrfs transaction, so a workspace keeps its
// subvolume from job to job (Attach once per slot, emptied by Clear); a
// job's quota is one ioctl.
//
// A Disk is shared by every executor of the process over the same work
// directory; its methods are safe for concurrent use.
type Disk struct {
	// Path is where the file system is mounted: Root/.disk.
	Path string
	// Image is the image file it is mounted from: Root/.disk.img.
	Image string
	// Made says OpenDisk made the image (rather than finding it), Grown
	// that it found it smaller than asked and grew it.
	Made, Grown bool
	// Size is the image's size in bytes.
	Size int64

	fd      int    // Path, open, for the subvolume ioctls
	qgroups string // the file system's qgroups in sysfs
	seq     atomic.Int64
	// opens counts OpenDisk calls not yet closed, refs those and the
	// attached workspaces: the mount goes when opens is zero, the
	// file descriptor when refs is.
	opens, refs int
	// stale are the qgroups of deleted subvolumes not yet removed (see
	// sweep); guarded by disks.
	stale []uint64
}

// disks are the open Disks by work directory.
var disks = struct {
	sync.Mutex
	m map[string]*Disk
}{m: map[string]*Disk{}}

// OpenDisk returns the file system for jobs' writable space under root (a
// work directory): the btrfs image root/.disk.img, made with mkfs.btrfs of
// size bytes if missing (sparse: it takes disk space as jobs write), mounted
// at root/.disk with quotas on. An image made before is reused as it is,
// and so is one a node agent that died left mounted; what that agent's jobs
// left in it is removed. Two OpenDisks of one root in a process share the
// Disk; each must be closed.
//
// It fails where btrfs, loop devices or mkfs.btrfs (btrfs-progs) are
// missing; the caller then keeps jobs' writable space in a tmpfs.
func OpenDisk(root string, size int64) (*Disk, error) {
	disks.Lock()
	defer disks.Unlock()
	if d := disks.m[root]; d != nil {
		d.opens++
		d.refs++
		return d, nil
	}
	d := &Disk{Path: filepath.Join(root, ".disk"), Image: filepath.Join(root, ".disk.img"), fd: -1}
	if err := d.mount(size); err != nil {
		return nil, err
	}
	fd, err := unix.Open(d.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Unmount(d.Path, unix.MNT_DETACH)
		return nil, fmt.Errorf("open job disk: %w", err)
	}
	d.fd = fd
	if err := d.ready(); err != nil {
		unix.Close(fd)
		_ = unix.Unmount(d.Path, unix.MNT_DETACH)
		return nil, err
	}
	d.opens, d.refs = 1, 1
	disks.m[root] = d
	return d, nil
}

// mount makes the image if need be and mounts it, unless it is mounted.
func (d *Disk) mount(size int64) error {
	if err := os.Mkdir(d.Path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make job disk mount point: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.Path, &st); err != nil {
		return fmt.Errorf("job disk: %w", err)
	}
	if st.Type == unix.BTRFS_SUPER_MAGIC {
		// Left mounted by a node agent that died: its image, reused.
		if fi, err := os.Stat(d.Image); err == nil {
			d.Size = fi.Size()
		}
		return nil
	}
	if _, err := os.Stat(d.Image); errors.Is(err, os.ErrNotExist) {
		if err := makeImage(d.Image, size); err != nil {
			return err
		}
		d.Made = true
	} else if err != nil {
		return fmt.Errorf("job disk image: %w", err)
	}
	fi, err := os.Stat(d.Image)
	if err != nil {
		return fmt.Errorf("job disk image: %w", err)
	}
	d.Size = fi.Size()
	if size > d.Size {
		// The node's disk was raised since the image was made: the file
		// grows now, the file system once mounted (shrinking is not done).
		if err := os.Truncate(d.Image, size); err != nil {
			return fmt.Errorf("grow job disk image: %w", err)
		}
		d.Size, d.Grown = size, true
	}
	dev, err := attachLoop(d.Image)
	if err != nil {
		return err
	}
	err = unix.Mount(dev.Name(), d.Path, "btrfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "")
	// The device detaches itself once unmounted (LO_FLAGS_AUTOCLEAR), or
	// now if the mount failed.
	dev.Close()
	if err != nil {
		return fmt.Errorf("mount job disk %s from %s: %w", d.Path, d.Image, err)
	}
	if d.Grown {
		fd, err := unix.Open(d.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = resizeMax(fd)
			unix.Close(fd)
		}
		if err != nil {
			_ = unix.Unmount(d.Path, unix.MNT_DETACH)
			return err
		}
	}
	return nil
}

// ready turns quotas on, checks that the kernel keeps qgroups for the file
// system, closes it to everyone but root, and removes what jobs of an
// earlier node agent left.
func (d *Disk) ready() error {
	if err := quotaEnable(d.fd); err != nil {
		return err
	}
	uuid, err := fsUUID(d.fd)
	if err != nil {
		return err
	}
	d.qgroups = filepath.Join("/sys/fs/btrfs", uuid, "qgroups")
	if _, err := os.Stat(d.qgroups); err != nil {
		return fmt.Errorf("job disk has no qgroups in sysfs: %w", err)
	}
	if err := unix.Fchmod(d.fd, 0o700); err != nil {
		return fmt.Errorf("job disk: %w", err)
	}
	names, err := readDirNames(d.Path)
	if err != nil {
		return fmt.Errorf("job disk: %w", err)
	}
	for _, n := range names {
		if err := subvolDestroy(d.fd, n); err != nil {
			if err := os.RemoveAll(filepath.Join(d.Path, n)); err != nil {
				return fmt.Errorf("remove stale job space %s: %w", n, err)
			}
		}
	}
	// Every subvolume is gone: every qgroup but the top's (0/5) is stale.
	qgroups, err := readDirNames(d.qgroups)
	if err != nil {
		return fmt.Errorf("job disk: %w", err)
	}
	for _, q := range qgroups {
		if id, err := strconv.ParseUint(strings.TrimPrefix(q, "0_"), 10, 64); err == nil && strings.HasPrefix(q, "0_") && id != 5 {
			d.stale = append(d.stale, id)
		}
	}
	d.sweep()
	return nil
}

// sweep removes the qgroups of deleted subvolumes that the kernel has
// dropped by now: without it, each slot ever made would leave one in the
// file system (and in sysfs). It is called when slots come and go, not per
// job; disks must be locked (or d not yet shared).
func (d *Disk) sweep() {
	left := d.stale[:0]
	for _, id := range d.stale {
		if err := qgroupRemove(d.fd, id); errors.Is(err, unix.EBUSY) {
			left = append(left, id)
		}
	}
	d.stale = left
}

// makeImage makes a sparse file of size bytes and a btrfs file system in
// it, under a temporary name renamed into place once whole.
func makeImage(path string, size int64) error {
	mkfs, err := exec.LookPath("mkfs.btrfs")
	if err != nil {
		return fmt.Errorf("make job disk image: %w (install btrfs-progs)", err)
	}
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("make job disk image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var out []byte
		if out, err = exec.Command(mkfs, "-q", "-f", tmp).CombinedOutput(); err != nil {
			err = fmt.Errorf("%s: %w: %s", mkfs, err, strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("make job disk image of %d bytes: %w", size, err)
	}
	return nil
}

// attachLoop binds a free loop device to the image, with direct I/O where
// the image's file system allows it (else the image's pages would be cached
// twice, once for the loop device's file), and returns the device open.
func attachLoop(image string) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("loop device: %w", err)
		}
		err = configureLoop(dev, image)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) || try == 20 {
			return nil, fmt.Errorf("attach %s to /dev/loop%d: %w", image, n, err)
		}
		// Another process took the device between the two calls.
		time.Sleep(time.Millisecond)
	}
}

func configureLoop(dev *os.File, image string) error {
	for _, direct := range []bool{true, false} {
		flags := os.O_RDWR
		cfg := unix.LoopConfig{Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}}
		if direct {
			flags |= unix.O_DIRECT
			cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
			cfg.Size = 4096
		}
		img, err := os.OpenFile(image, flags, 0)
		if err != nil {
			if direct {
				continue
			}
			return err
		}
		cfg.Fd = uint32(img.Fd())
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		img.Close()
		if err == nil || errors.Is(err, unix.EBUSY) || !direct {
			return err
		}
	}
	return nil
}

// Close gives back an OpenDisk. The last one unmounts the file system (its
// workspaces still attached keep it alive, detached, until removed); the
// image stays for the next node agent.
func (d *Disk) Close() error {
	disks.Lock()
	defer disks.Unlock()
	if d.opens == 0 {
		return nil
	}
	d.opens--
	var err error
	if d.opens == 0 {
		for k, v := range disks.m {
			if v == d {
				delete(disks.m, k)
			}
		}
		if uerr := unix.Unmount(d.Path, unix.MNT_DETACH); uerr != nil && !errors.Is(uerr, unix.EINVAL) {
			err = fmt.Errorf("unmount job disk: %w", uerr)
		}
	}
	d.unref()
	return err
}

// unref drops a reference; disks must be locked.
func (d *Disk) unref() {
	d.refs--
	if d.refs == 0 && d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// space is one workspace's subvolume in a Disk.
type space struct {
	disk *Disk
	name string // in the Disk's top directory
	id   uint64 // the subvolume's id, and its qgroup's (level 0)
	fd   int    // the subvolume's root directory, open
	// bound is the qgroup limit set last: the next job's is most often
	// the same, and then not set again.
	bound int64
}

// newSpace makes a subvolume in d for one workspace.
func (d *Disk) newSpace() (*space, error) {
	disks.Lock()
	if d.fd < 0 {
		disks.Unlock()
		return nil, errors.New("job disk is closed")
	}
	d.refs++
	d.sweep()
	disks.Unlock()
	s := &space{disk: d, name: strconv.FormatInt(d.seq.Add(1), 10), fd: -1}
	if err := subvolCreate(d.fd, s.name); err != nil {
		s.unref()
		return nil, err
	}
	fd, err := unix.Openat(d.fd, s.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err == nil {
		s.fd = fd
		s.id, err = subvolID(fd)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open subvolume: %w", err), s.destroy())
	}
	return s, nil
}

// path is the subvolume's path on the node.
func (s *space) path() string { return filepath.Join(s.disk.Path, s.name) }

// limit bounds the subvolume at bytes.
func (s *space) limit(bytes int64) error {
	if bytes == s.bound {
		return nil
	}
	if err := qgroupLimit(s.fd, uint64(bytes)); err != nil {
		return err
	}
	s.bound = bytes
	return nil
}

// used is what the subvolume holds, as of the file system's last
// transaction: sync first for what was just written.
func (s *space) used() (int64, error) {
	b, err := os.ReadFile(filepath.Join(s.disk.qgroups, "0_"+strconv.FormatUint(s.id, 10), "referenced"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// destroy deletes the subvolume and what it holds.
func (s *space) destroy() error {
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
	err := subvolDestroy(s.disk.fd, s.name)
	disks.Lock()
	if err == nil && s.id != 0 {
		s.disk.stale = append(s.disk.stale, s.id)
		s.disk.sweep()
	}
	s.disk.unref()
	disks.Unlock()
	return err
}

func (s *space) unref() {
	disks.Lock()
	s.disk.unref()
	disks.Unlock()
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
