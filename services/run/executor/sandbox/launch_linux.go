//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// launch describes one job start: everything the launcher thread needs,
// prepared on the host side beforehand.
type launch struct {
	rootDir string // empty host directory where the job's root tmpfs is mounted
	binds   []bind // mounts into the new root, in order
	links   []link // symlinks in the new root
	dirs    []string
	argv    []string
	env     []string
	path    []string // PATH of the job, for a command without a slash
	uid     int
	gid     int
	files   []*os.File // stdin, stdout, stderr
	capLast int
	filter  []unix.SockFilter
	// admit is called with the job's pid while it is stopped right after its
	// execve, before its first instruction: it puts the pid in the job's
	// cgroup. It runs on another thread, since this one no longer sees /sys.
	admit func(pid int) error
}

// bind is one bind mount of a host path into the job's root.
type bind struct {
	src, dst string // dst relative to the new root
	readOnly bool
	noexec   bool
	file     bool // src is a file, not a directory
}

type link struct{ name, target string }

// started is what the launcher reports once the job runs (pid) or could not
// be started (err).
type started struct {
	pid int
	err error
}

// exited is the wait status of the job's pid 1.
type exited struct {
	status unix.WaitStatus
	err    error
}

// run starts the job and then waits for its pid 1. It must be called on a
// goroutine of its own: it locks that goroutine to its OS thread, moves the
// thread into new namespaces, builds the job's root there and never unlocks,
// so the Go runtime throws the thread away when run returns instead of ever
// scheduling other goroutines on it.
//
// The job is forked from that thread, so it inherits the namespaces, the new
// root, no_new_privs, the dropped capability bounding set and the seccomp
// filter without any helper program running between fork and exec. The
// thread stays alive (blocked in wait4) for as long as the job's pid 1 lives,
// which is what PR_SET_PDEATHSIG ties the job to: if the node agent dies, its
// jobs die with it.
func (l *launch) run(start chan<- started, done chan<- exited) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// Never the main thread: it cannot exit (the runtime would park it
		// for good, still in the job's namespaces), and /proc/self shows the
		// whole process the main thread's view. Holding it locked makes the
		// goroutine below start on another thread.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			l.launch(start, done)
		}()
		<-locked
		runtime.UnlockOSThread()
		return
	}
	l.launch(start, done)
}

// launch does the work of run on a locked thread other than the main one.
func (l *launch) launch(start chan<- started, done chan<- exited) {
	// Deliberately no UnlockOSThread.
	pid, err := l.start()
	start <- started{pid: pid, err: err}
	if err != nil {
		return
	}
	var ws unix.WaitStatus
	for {
		_, err = unix.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	done <- exited{status: ws, err: err}
}

func (l *launch) start() (int, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_FS); err != nil {
		return 0, fmt.Errorf("unshare namespaces: %w", err)
	}
	// The host's /proc, kept open to find the job's pid namespace after the
	// host's mounts are gone from this thread's view.
	hostProc, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open /proc: %w", err)
	}
	defer unix.Close(hostProc)
	if err := l.buildRoot(); err != nil {
		return 0, err
	}
	if err := unix.Sethostname([]byte("e31")); err != nil {
		return 0, fmt.Errorf("set hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return 0, err
	}
	argv0, err := l.lookPath()
	if err != nil {
		return 0, err
	}
	if err := l.restrict(); err != nil {
		return 0, err
	}
	attr := &syscall.ProcAttr{
		Dir:   "/tmp",
		Env:   l.env,
		Files: []uintptr{l.files[0].Fd(), l.files[1].Fd(), l.files[2].Fd()},
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Ptrace:     true, // stop right after execve; see admit
			Pdeathsig:  syscall.SIGKILL,
			Credential: &syscall.Credential{Uid: uint32(l.uid), Gid: uint32(l.gid), Groups: []uint32{}},
		},
	}
	pid, err := syscall.ForkExec(argv0, l.argv, attr)
	if err != nil {
		return 0, fmt.Errorf("exec %s: %w", l.argv[0], err)
	}
	if err := l.afterExec(pid, hostProc); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
		return 0, err
	}
	return pid, nil
}

// afterExec runs while the job's pid 1 is stopped at its first instruction:
// it joins the cgroup, gets a /proc of its own pid namespace, and goes.
func (l *launch) afterExec(pid, hostProc int) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for exec stop: %w", err)
		}
		break
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
		return fmt.Errorf("job did not stop after exec (status %#x)", ws)
	}
	if err := l.admit(pid); err != nil {
		return fmt.Errorf("join cgroup: %w", err)
	}
	if err := mountProc(hostProc, pid); err != nil {
		return err
	}
	if err := unix.PtraceDetach(pid); err != nil {
		return fmt.Errorf("release job from exec stop: %w", err)
	}
	return nil
}

// buildRoot makes the job's filesystem and pivots this thread into it. The
// new root is a small tmpfs holding only mount points, device nodes and
// symlinks; it is read-only once built.
func (l *launch) buildRoot() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	root := l.rootDir
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID, "size=256k,nr_inodes=512,mode=0755"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	unix.Umask(0)
	for _, d := range l.dirs {
		if err := unix.Mkdir(filepath.Join(root, d), 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	for _, d := range devices {
		if err := unix.Mknod(filepath.Join(root, "dev", d.name), unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("mknod /dev/%s: %w", d.name, err)
		}
	}
	for _, ln := range l.links {
		if err := unix.Symlink(ln.target, filepath.Join(root, ln.name)); err != nil {
			return fmt.Errorf("symlink %s: %w", ln.name, err)
		}
	}
	for _, b := range l.binds {
		dst := filepath.Join(root, b.dst)
		if b.file {
			fd, err := unix.Open(dst, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return fmt.Errorf("mount point %s: %w", b.dst, err)
			}
			unix.Close(fd)
		} else if err := unix.Mkdir(dst, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mount point %s: %w", b.dst, err)
		}
		if err := unix.Mount(b.src, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s at %s: %w", b.src, b.dst, err)
		}
		flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV)
		if b.readOnly {
			flags |= unix.MS_RDONLY
		}
		if b.noexec {
			flags |= unix.MS_NOEXEC
		}
		if err := unix.Mount("", dst, "", flags, ""); err != nil {
			return fmt.Errorf("restrict %s: %w", b.dst, err)
		}
	}
	unix.Umask(0o022)
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID, ""); err != nil {
		return fmt.Errorf("make root read-only: %w", err)
	}
	// pivot_root(".", ".") stacks the old root on top of the new one; the
	// lazy unmount then takes the whole host tree out of this namespace.
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("chdir new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach host root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}

// devices are the nodes of the job's /dev.
var devices = []struct {
	name         string
	major, minor uint32
}{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

// mountProc mounts at /proc a procfs of the job's pid namespace, with the
// "pidns" option (Linux 6.18 here): the namespace has no process but the job
// yet, and this thread is not in it.
func mountProc(hostProc, pid int) error {
	ns, err := unix.Openat(hostProc, strconv.Itoa(pid)+"/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open job pid namespace: %w", err)
	}
	defer unix.Close(ns)
	fs, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen proc: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetFd(fs, "pidns", ns); err != nil {
		return fmt.Errorf("proc pidns option: %w", err)
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return fmt.Errorf("create proc: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("fsmount proc: %w", err)
	}
	defer unix.Close(mnt)
	if err := unix.MoveMount(mnt, "", unix.AT_FDCWD, "/proc", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// loopbackUp brings up lo in the job's network namespace, its only interface.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// restrict sets what the job inherits from this thread at fork: no new
// privileges through execve, an empty capability bounding set, the seccomp
// filter. The uid change in the child then clears every capability.
func (l *launch) restrict() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	for c := 0; c <= l.capLast; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	return installSeccomp(l.filter)
}

// lookPath finds the command in the job's own root (this thread is already
// in it), the way a shell would.
func (l *launch) lookPath() (string, error) {
	name := l.argv[0]
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range l.path {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec %s: %w", name, errNotFound)
}

// errNotFound is returned when a job's command is not in its PATH.
var errNotFound = errors.New("executable file not found in $PATH")
