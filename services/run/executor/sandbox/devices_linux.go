//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/e31net/e31/services/run/gpu"
)

// What a job may open of the node's devices.
//
// Every job's cgroup refuses every device but the nodes of its /dev: the
// ones every job has (null, zero, full, random, urandom, tty) and, for a
// job holding GPUs, its devices' /dev/nvidia<minor> and the driver's
// nvidiactl, nvidia-uvm and nvidia-uvm-tools. The /dev a job sees is the
// first line of defence (it has no other node, and no CAP_MKNOD to make
// one); the cgroup is the second, which also holds for a node that
// reaches the job some other way (a bind mount, a file descriptor passed
// in, a node made by a process that had the capability): the kernel
// refuses to open it (EPERM) before any driver sees the open. On cgroup
// v1 the rules are the devices controller's devices.deny and
// devices.allow; on v2, an eBPF program attached to the job's cgroup
// (containerd/cgroups' device filter), which has no "deny all" of its own:
// a device no rule allows is refused.

// deviceRules are the rules of a job whose /dev also holds extra (its
// GPUs' nodes): deny everything, then allow each node, read and write
// (and mknod, which a job cannot use without CAP_MKNOD).
func deviceRules(extra []gpu.Node) []specs.LinuxDeviceCgroup {
	any := int64(-1) // every major, every minor
	rules := []specs.LinuxDeviceCgroup{{Allow: false, Type: "a", Major: &any, Minor: &any, Access: "rwm"}}
	allow := func(major, minor uint32) {
		ma, mi := int64(major), int64(minor)
		rules = append(rules, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &ma, Minor: &mi, Access: "rwm"})
	}
	for _, d := range devices {
		allow(d.major, d.minor)
	}
	for _, n := range extra {
		allow(n.Major, n.Minor)
	}
	return rules
}

// v1Lines are rules as the v1 devices controller reads them: the first
// (deny everything) is written to devices.deny, the others each to
// devices.allow.
func v1Lines(rules []specs.LinuxDeviceCgroup) (deny string, allow []string) {
	deny = "a"
	for _, r := range rules[1:] {
		allow = append(allow, fmt.Sprintf("%s %d:%d %s", r.Type, *r.Major, *r.Minor, r.Access))
	}
	return deny, allow
}

// devNodes makes, in this thread's mount namespace (the job's, before its
// fork), a /dev of its own for a job holding GPUs: a small tmpfs with the
// nodes every job has, the links of the template's /dev and the GPU nodes,
// then read-only. A job holding none keeps the template's /dev, shared by
// every job, which has no GPU node at all. unallowed are nodes made there
// that the job's cgroup does not allow: a test's, to see the cgroup refuse
// them.
func devNodes(extra, unallowed []gpu.Node, links []link) error {
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755"); err != nil {
		return fmt.Errorf("mount the job's /dev: %w", err)
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	mk := func(name string, major, minor uint32) error {
		if err := unix.Mknod(filepath.Join("/dev", name), unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
			return fmt.Errorf("mknod /dev/%s: %w", name, err)
		}
		return nil
	}
	for _, d := range devices {
		if err := mk(d.name, d.major, d.minor); err != nil {
			return err
		}
	}
	for _, n := range append(append([]gpu.Node{}, extra...), unallowed...) {
		if err := mk(n.Name, n.Major, n.Minor); err != nil {
			return err
		}
	}
	for _, ln := range links {
		name, ok := strings.CutPrefix(ln.name, "dev/")
		if !ok {
			continue
		}
		if err := unix.Symlink(ln.target, filepath.Join("/dev", name)); err != nil {
			return fmt.Errorf("symlink /dev/%s: %w", name, err)
		}
	}
	if err := unix.Mount("", "/dev", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make the job's /dev read-only: %w", err)
	}
	return nil
}

// driverDir is where the NVIDIA driver shows itself in procfs.
const driverDir = "/proc/driver/nvidia"

// hideDriver covers, in the job's /proc (mounted in this thread's mount
// namespace), what the driver shows of the devices the job does not hold
// (each /proc/driver/nvidia/gpus/<bus> under an empty read-only tmpfs),
// and mounts params (a detached mount of a copy with ModifyDeviceFiles: 0,
// or -1) over the driver's params. It does nothing where the driver is
// not loaded.
func hideDriver(hide []string, params int) error {
	if _, err := os.Stat(driverDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, bus := range hide {
		dir := filepath.Join(driverDir, "gpus", bus)
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=0555"); err != nil {
			return fmt.Errorf("hide %s: %w", dir, err)
		}
	}
	if params >= 0 {
		dst := filepath.Join(driverDir, "params")
		if err := unix.MoveMount(params, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount params over %s: %w", dst, err)
		}
	}
	return nil
}
