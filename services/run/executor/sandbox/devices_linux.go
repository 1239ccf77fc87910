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

	"github.com/e31net/e31/pkg/events"
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

// driverClones are what of the node's driver view a job is shown, cloned
// while the node's files are in view (see driverClones.clone): each held
// device's entry of the driver's device list, and the params to mount
// over the driver's.
type driverClones struct {
	buses  []string // the held devices' bus locations, one per fd of gpus
	gpus   []int
	params int // -1 for none
}

// clone clones, from the node's view, procDir/<bus> of each held device
// that has one, and params ("" for none). Only where the node has a
// driver (procDir exists); nothing is cloned for a test's fake one, whose
// entries no job's /proc would have anyway.
func (d *driverClones) clone(procDir string, held []events.Device, params string) error {
	if procDir == "" {
		return nil
	}
	if _, err := os.Stat(driverDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, dev := range held {
		src := filepath.Join(procDir, dev.Bus)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("clone %s: %w", src, err)
		}
		d.buses, d.gpus = append(d.buses, dev.Bus), append(d.gpus, fd)
	}
	if params != "" {
		fd, err := bind{src: params, readOnly: true}.clone()
		if err != nil {
			return err
		}
		d.params = fd
	}
	return nil
}

func (d *driverClones) close() {
	for _, fd := range d.gpus {
		unix.Close(fd)
	}
	if d.params >= 0 {
		unix.Close(d.params)
	}
	*d = driverClones{params: -1}
}

// hideDriver shows, in the job's /proc (mounted in this thread's mount
// namespace), only what d holds of the driver, as nvidia-container-toolkit
// does: /proc/driver/nvidia/gpus is covered by a read-only tmpfs that
// holds the held devices' entries alone (CUDA and NVML list the devices
// they find there), and params, with ModifyDeviceFiles: 0, is mounted
// over the driver's. It does nothing where the driver is not loaded.
func hideDriver(d driverClones) error { return hideDriverAt(driverDir, d) }

// hideDriverAt is hideDriver of a driver shown at dir.
func hideDriverAt(dir string, d driverClones) error {
	gpus := filepath.Join(dir, "gpus")
	if _, err := os.Stat(gpus); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := unix.Mount("tmpfs", gpus, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,nr_inodes=64,mode=0555"); err != nil {
		return fmt.Errorf("cover %s: %w", gpus, err)
	}
	for i, bus := range d.buses {
		dst := filepath.Join(gpus, bus)
		if err := unix.Mkdir(dst, 0o555); err != nil {
			return fmt.Errorf("mkdir %s: %w", dst, err)
		}
		if err := unix.MoveMount(d.gpus[i], "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount the driver's %s: %w", dst, err)
		}
	}
	if err := unix.Mount("", gpus, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", gpus, err)
	}
	if d.params >= 0 {
		dst := filepath.Join(dir, "params")
		if err := unix.MoveMount(d.params, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount params over %s: %w", dst, err)
		}
	}
	return nil
}
