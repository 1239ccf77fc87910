//go:build linux

package workspace

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The btrfs ioctls a Disk makes, from the kernel's uapi header
// linux/btrfs.h. The numbers were printed by a C program compiled against
// that header (amd64; arm64 encodes _IOW/_IOR/_IOWR the same way), and the
// argument structs below have its layouts field for field.
const (
	iocResize       = 0x50009403 // _IOW(0x94, 3, struct btrfs_ioctl_vol_args)
	iocSubvolCreate = 0x5000940e // _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
	iocSnapDestroy  = 0x5000940f // _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	iocInoLookup    = 0xd0009412 // _IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args)
	iocFSInfo       = 0x8400941f // _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args)
	iocQuotaCtl     = 0xc0109428 // _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args)
	iocQgroupCreate = 0x4010942a // _IOW(0x94, 42, struct btrfs_ioctl_qgroup_create_args)
	iocQgroupLimit  = 0x8030942b // _IOR(0x94, 43, struct btrfs_ioctl_qgroup_limit_args)

	quotaCtlEnable      = 1      // BTRFS_QUOTA_CTL_ENABLE
	qgroupLimitMaxRfer  = 1 << 0 // BTRFS_QGROUP_LIMIT_MAX_RFER
	firstFreeObjectID   = 256    // BTRFS_FIRST_FREE_OBJECTID: a subvolume's root directory
	btrfsPathNameMax    = 4087   // BTRFS_PATH_NAME_MAX
	btrfsInoLookupPathN = 4080   // BTRFS_INO_LOOKUP_PATH_MAX
)

// volArgs is struct btrfs_ioctl_vol_args.
type volArgs struct {
	fd   int64
	name [btrfsPathNameMax + 1]byte
}

// inoLookupArgs is struct btrfs_ioctl_ino_lookup_args.
type inoLookupArgs struct {
	treeID   uint64
	objectID uint64
	name     [btrfsInoLookupPathN]byte
}

// fsInfoArgs is struct btrfs_ioctl_fs_info_args (1024 bytes).
type fsInfoArgs struct {
	maxID, numDevices    uint64
	fsid                 [16]byte
	nodesize, sectorsize uint32
	cloneAlignment       uint32
	csumType, csumSize   uint16
	flags, generation    uint64
	metadataUUID         [16]byte
	_                    [944]byte
}

// quotaCtlArgs is struct btrfs_ioctl_quota_ctl_args.
type quotaCtlArgs struct{ cmd, status uint64 }

// qgroupLimitArgs is struct btrfs_ioctl_qgroup_limit_args with its struct
// btrfs_qgroup_limit inline.
type qgroupLimitArgs struct {
	qgroupID                uint64
	flags, maxRfer, maxExcl uint64
	rsvRfer, rsvExcl        uint64
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

func volName(name string) (*volArgs, error) {
	a := new(volArgs)
	if len(name) == 0 || len(name) > btrfsPathNameMax {
		return nil, fmt.Errorf("subvolume name %q: bad length", name)
	}
	copy(a.name[:], name)
	return a, nil
}

// subvolCreate makes the subvolume name in the directory dirfd.
func subvolCreate(dirfd int, name string) error {
	a, err := volName(name)
	if err != nil {
		return err
	}
	if err := ioctl(dirfd, iocSubvolCreate, unsafe.Pointer(a)); err != nil {
		return fmt.Errorf("create subvolume %s: %w", name, err)
	}
	return nil
}

// subvolDestroy deletes the subvolume name in the directory dirfd, with
// whatever it holds: the kernel drops its tree in the background.
func subvolDestroy(dirfd int, name string) error {
	a, err := volName(name)
	if err != nil {
		return err
	}
	if err := ioctl(dirfd, iocSnapDestroy, unsafe.Pointer(a)); err != nil {
		return fmt.Errorf("delete subvolume %s: %w", name, err)
	}
	return nil
}

// resizeMax grows the file system to the whole of its (only) device.
func resizeMax(fd int) error {
	a, _ := volName("max")
	if err := ioctl(fd, iocResize, unsafe.Pointer(a)); err != nil {
		return fmt.Errorf("resize job disk: %w", err)
	}
	return nil
}

// subvolID is the id (and qgroup id, level 0) of the subvolume fd is in.
func subvolID(fd int) (uint64, error) {
	a := &inoLookupArgs{objectID: firstFreeObjectID}
	if err := ioctl(fd, iocInoLookup, unsafe.Pointer(a)); err != nil {
		return 0, fmt.Errorf("look up subvolume id: %w", err)
	}
	return a.treeID, nil
}

// fsUUID is the file system's UUID as sysfs names it (/sys/fs/btrfs/UUID).
func fsUUID(fd int) (string, error) {
	var a fsInfoArgs
	if err := ioctl(fd, iocFSInfo, unsafe.Pointer(&a)); err != nil {
		return "", fmt.Errorf("btrfs fs info: %w", err)
	}
	u := a.fsid
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// quotaEnable turns qgroups on (nothing happens if they are on already).
func quotaEnable(fd int) error {
	a := &quotaCtlArgs{cmd: quotaCtlEnable}
	if err := ioctl(fd, iocQuotaCtl, unsafe.Pointer(a)); err != nil {
		return fmt.Errorf("enable btrfs quota: %w", err)
	}
	return nil
}

// qgroupCreateArgs is struct btrfs_ioctl_qgroup_create_args.
type qgroupCreateArgs struct{ create, qgroupID uint64 }

// qgroupRemove removes the qgroup of a deleted subvolume, which the kernel
// keeps (as "stale") otherwise. It fails with EBUSY until the kernel has
// dropped the subvolume's tree, which it does in the background.
func qgroupRemove(fd int, id uint64) error {
	a := &qgroupCreateArgs{create: 0, qgroupID: id}
	return ioctl(fd, iocQgroupCreate, unsafe.Pointer(a))
}

// qgroupLimit bounds what the subvolume fd is in refers to at maxRfer
// bytes. (The kernel reads qgroup id 0 as the subvolume of the fd.)
func qgroupLimit(fd int, maxRfer uint64) error {
	a := &qgroupLimitArgs{flags: qgroupLimitMaxRfer, maxRfer: maxRfer}
	if err := ioctl(fd, iocQgroupLimit, unsafe.Pointer(a)); err != nil {
		return fmt.Errorf("set qgroup limit: %w", err)
	}
	return nil
}
