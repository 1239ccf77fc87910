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
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/gpu"
)

// launch describes one job start: everything the launcher thread needs,
// prepared on the host side beforehand.
type launch struct {
	// template is the mount namespace whose root the job's is a copy of
	// (see buildTemplate).
	template int
	binds    []bind // mounts into the new root, in order
	argv     []string
	env      []string
	path     []string // PATH of the job, for a command without a slash
	uid      int
	gid      int
	files    []*os.File // stdin, stdout, stderr
	capLast  int
	filter   []unix.SockFilter
	// hostProc mounts, before the fork, a procfs of the host's pid
	// namespace showing only the job uid's processes, for kernels that
	// cannot mount one of the job's pid namespace afterwards.
	hostProc bool
	// netns is the network namespace the job joins (see netns).
	netns int
	// enter are the job cgroup's "tasks" files (jobCgroup.enterFiles): the
	// launcher thread writes itself into them just before it forks, so
	// that the job is born in its cgroup, and then out again through leave
	// (cgroupDriver.leaveFiles). A thread moving itself is cheap where
	// moving a process is not: the kernel then takes a lock that stops
	// every fork and exit on the host and waits for an RCU grace period.
	enter, leave []int
	// admit is called with the job's pid while it is stopped right after
	// its execve, before its first instruction (see jobCgroup.admit).
	admit func(pid int) error
	// gpus are the device nodes of the GPUs the job holds: with any, it
	// gets a /dev of its own holding them (devNodes, with links and, for a
	// test, unallowed), instead of the template's.
	gpus, unallowed []gpu.Node
	links           []link
	// procDir, held and params are what the job's /proc shows of the
	// driver (see hideDriver): procDir is where the node's driver lists
	// its devices, held the job's devices, params a file on the node ("",
	// none for each).
	procDir string
	held    []events.Device
	params  string
	// driver is procDir's entries of the held devices and params, cloned
	// (open_tree) while the node's files are in view, for hideDriver to
	// mount once the job's /proc is.
	driver driverClones
}

// bind is one bind mount of a host path into the job's root.
type bind struct {
	src, dst string // dst relative to the new root
	readOnly bool
	noexec   bool
	// overlay mounts, instead of a bind of src, a read-only overlay whose
	// two layers are src and, below it, the empty directory emptyDir: the
	// job's mount table then shows the mount's root as "/" and its layers
	// by paths relative to src's parent, where a bind would show src's
	// path on the host's filesystem (the node's work directory).
	overlay  bool
	emptyDir string
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

// onOwnThread runs f on a goroutine locked to an OS thread that is not the
// main one and that the runtime discards afterwards, for f to change the
// thread's namespaces, root and credentials at will. It returns once f runs.
func onOwnThread(f func()) {
	runtime.LockOSThread()
	if unix.Gettid() != unix.Getpid() {
		f()
		return // deliberately still locked: the thread goes with the goroutine
	}
	// Never the main thread: it cannot exit (the runtime would park it for
	// good, still in the job's namespaces), and /proc/self, which the rest
	// of the process reads (cgroups, mounts), is its view. Holding it
	// locked makes the goroutine below start on another thread.
	locked := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(locked)
		f()
	}()
	<-locked
	runtime.UnlockOSThread()
}

// launch starts the job and then waits for its pid 1, on a thread locked to
// its goroutine (see launchers), already restricted (see restrict). It
// moves the thread into the job's namespaces and root, so the Go runtime
// must never schedule another goroutine on it; launchers takes it out of
// them again, or lets the runtime throw it away.
//
// The job is forked from that thread, so it inherits the namespaces, the new
// root, no_new_privs, the dropped capability bounding set and the seccomp
// filter without any helper program running between fork and exec. The
// thread stays alive (blocked in wait4) for as long as the job's pid 1 lives,
// which is what PR_SET_PDEATHSIG ties the job to: if the node agent dies, its
// jobs die with it.
//
// It reports whether the thread may start another job: not if it could not
// leave the job's cgroup.
func (l *launch) launch(start chan<- started, done chan<- exited) (reusable bool) {
	pid, err := l.start()
	start <- started{pid: pid, err: err}
	if err != nil {
		return !errors.Is(err, errStuckInCgroup)
	}
	ws, err := waitExit(pid)
	done <- exited{status: ws, err: err}
	return true
}

// errStuckInCgroup is returned by launch.start when the thread could not
// move itself out of the job's cgroup.
var errStuckInCgroup = errors.New("cannot leave the job's cgroup")

// waitExit waits for the child pid to exit and reaps it. A wait4 that
// blocks for the job's whole life would hold the goroutine's P in a system
// call until the runtime's monitor took it back (polling every 20 µs while
// any job runs); instead the goroutine parks on a pidfd, which the network
// poller sees become readable when the process exits.
func waitExit(pid int) (unix.WaitStatus, error) {
	var ws unix.WaitStatus
	reap := func() (bool, error) {
		for {
			got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return got != 0 || err != nil, err
		}
	}
	if fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK); err == nil {
		f := os.NewFile(uintptr(fd), "pidfd")
		defer f.Close()
		if rc, err := f.SyscallConn(); err == nil {
			var werr error
			err := rc.Read(func(uintptr) bool {
				var done bool
				done, werr = reap()
				return done
			})
			if err == nil {
				return ws, werr
			}
		}
	}
	// No pidfd (Linux before 5.3) or no poller for it: block.
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			return ws, err
		}
	}
}

// hostProcDir is the host's /proc, opened once for the process (O_PATH): a
// launcher thread finds the job's pid namespace through it once the host's
// mounts are out of its view. An open and a close per job saved.
var hostProcDir = sync.OnceValues(func() (int, error) {
	fd, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /proc: %w", err)
	}
	return fd, nil
})

// devNull is /dev/null opened once for the process, read-only: every job's
// stdin is a copy of it (the child's own descriptor, at its fork), which
// saves an open, four fcntls and a close per job. It is never closed.
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

func (l *launch) start() (int, error) {
	hostProc, err := hostProcDir()
	if err != nil {
		return 0, err
	}
	l.driver = driverClones{params: -1}
	defer l.driver.close()
	if err := l.enterRoot(); err != nil {
		return 0, err
	}
	if err := unix.Sethostname([]byte("e31")); err != nil {
		return 0, fmt.Errorf("set hostname: %w", err)
	}
	argv0, err := l.lookPath()
	if err != nil {
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
	if err := writeZero(l.enter); err != nil {
		if lerr := writeZero(l.leave); lerr != nil {
			return 0, fmt.Errorf("%w: %v (after failing to enter it: %v)", errStuckInCgroup, lerr, err)
		}
		return 0, fmt.Errorf("enter job cgroup: %w", err)
	}
	if len(l.enter) > 0 {
		// A cgroup namespace rooted where the thread now is, the job's
		// cgroup in every hierarchy it has one in (and the node agent's
		// in the others): the job's /proc/self/cgroup shows "/", not
		// where the node keeps its jobs. (On v2, where the job joins its
		// cgroup only after exec, it would be rooted at the agent's.)
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			if lerr := writeZero(l.leave); lerr != nil {
				return 0, fmt.Errorf("%w: %v (after failing to unshare its cgroup namespace: %v)", errStuckInCgroup, lerr, err)
			}
			return 0, fmt.Errorf("unshare cgroup namespace: %w", err)
		}
	}
	pid, err := syscall.ForkExec(argv0, l.argv, attr)
	if lerr := writeZero(l.leave); lerr != nil {
		// A thread of the node agent must not stay in the job's cgroup:
		// no job, and the thread ends (see launch).
		if err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, 0, nil)
		}
		return 0, fmt.Errorf("%w: %v", errStuckInCgroup, lerr)
	}
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
// it is admitted to the cgroup, gets a /proc of its own pid namespace, and
// goes.
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
		return fmt.Errorf("admit to cgroup: %w", err)
	}
	if !l.hostProc {
		if err := mountProc(hostProc, pid); err != nil {
			return err
		}
		if err := hideDriver(l.driver); err != nil {
			return err
		}
	}
	if err := unix.PtraceDetach(pid); err != nil {
		return fmt.Errorf("release job from exec stop: %w", err)
	}
	return nil
}

// enterRoot moves this thread into the job's namespaces (new ones but for
// the network's) and root.
//
// The root is a copy of the template mount namespace (whose only mount is a
// read-only tmpfs of mount points, device nodes and links), so the host's
// mount table is never copied and nothing needs unmounting. The job's
// directories are cloned from the host first (open_tree), restricted while
// detached (mount_setattr) and attached in the copy (move_mount).
func (l *launch) enterRoot() error {
	clones := make([]int, 0, len(l.binds))
	defer func() {
		for _, fd := range clones {
			unix.Close(fd)
		}
	}()
	// The thread's own working directory, root and umask: mountOverlay
	// changes directory.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare fs: %w", err)
	}
	for _, b := range l.binds {
		fd, err := b.clone()
		if err != nil {
			return err
		}
		clones = append(clones, fd)
	}
	// Closed by start, once hideDriver has moved them.
	if err := l.driver.clone(l.procDir, l.held, l.params); err != nil {
		return err
	}
	if err := unix.Setns(l.template, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter template mount namespace: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWPID |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUTS); err != nil {
		return fmt.Errorf("unshare namespaces: %w", err)
	}
	if err := unix.Setns(l.netns, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter network namespace: %w", err)
	}
	for i, b := range l.binds {
		if err := unix.MoveMount(clones[i], "", unix.AT_FDCWD, "/"+b.dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount %s at /%s: %w", b.src, b.dst, err)
		}
	}
	if len(l.gpus) > 0 {
		if err := devNodes(l.gpus, l.unallowed, l.links); err != nil {
			return err
		}
	}
	if l.hostProc {
		// A new procfs instance (Linux 5.8+), so hidepid applies to it alone.
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible"); err != nil {
			return fmt.Errorf("mount /proc: %w", err)
		}
		if err := hideDriver(l.driver); err != nil {
			return err
		}
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}

// clone makes the mount b describes, detached (open_tree, or a new overlay),
// and restricts it (mount_setattr): nosuid, nodev, and read-only or noexec
// as b says. It returns the mount, for move_mount to attach.
func (b bind) clone() (int, error) {
	var fd int
	var err error
	if b.overlay {
		fd, err = mountOverlay(b.src, b.emptyDir)
	} else {
		fd, err = unix.OpenTree(unix.AT_FDCWD, b.src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	}
	if err != nil {
		return -1, fmt.Errorf("clone %s: %w", b.src, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
	if b.readOnly || b.overlay {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if b.noexec {
		attr.Attr_set |= unix.MOUNT_ATTR_NOEXEC
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("restrict %s: %w", b.src, err)
	}
	return fd, nil
}

// mountOverlay makes a detached, read-only overlay of dir over the empty
// directory empty and returns it. Its layers are named relative to dir's
// parent, which the calling thread changes to (it must have its own
// working directory: CLONE_FS unshared), since the job's mount table shows
// them as given.
func mountOverlay(dir, empty string) (int, error) {
	parent, name := filepath.Split(filepath.Clean(dir))
	emptyRel, err := filepath.Rel(parent, empty)
	if err != nil {
		return -1, err
	}
	if err := unix.Chdir(parent); err != nil {
		return -1, err
	}
	fs, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "lowerdir", name+":"+emptyRel); err != nil {
		return -1, fmt.Errorf("overlay lowerdir: %w", err)
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("create overlay: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount overlay: %w", err)
	}
	return mnt, nil
}

// buildTemplate makes the mount namespace every job's is copied from: its
// root is a read-only tmpfs holding the mount points (dirs), the device
// nodes of /dev and the links, with a read-only copy of the directory etc
// at /etc and the system directories (system: the same for every job)
// mounted; the host's mount tree is detached from it.
// mountpoint is a host directory to mount that tmpfs on (in the new
// namespace only). It returns a file descriptor of the namespace, which
// keeps it alive.
//
// The system directories are mounted here once, not for each job: every
// job's namespace is a copy of this one, and gets copies of their mounts
// with it (read-only, nosuid, nodev, as they are here), for none of the
// open_tree, mount_setattr, move_mount and close a job would otherwise
// make for each.
func buildTemplate(mountpoint, etc string, dirs []string, links []link, system []bind) (int, error) {
	type result struct {
		fd  int
		err error
	}
	rc := make(chan result, 1)
	go onOwnThread(func() {
		fd, err := makeTemplate(mountpoint, etc, dirs, links, system)
		rc <- result{fd, err}
	})
	r := <-rc
	return r.fd, r.err
}

func makeTemplate(root, etc string, dirs []string, links []link, system []bind) (int, error) {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return -1, fmt.Errorf("unshare mount namespace: %w", err)
	}
	ns, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open mount namespace: %w", err)
	}
	fail := func(err error) (int, error) {
		unix.Close(ns)
		return -1, err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail(fmt.Errorf("make mounts private: %w", err))
	}
	// The tmpfs covers root, and etc may be under it: read etc through a
	// descriptor opened before.
	etcFile, err := os.Open(etc)
	if err != nil {
		return fail(fmt.Errorf("open etc: %w", err))
	}
	defer etcFile.Close()
	etc = fmt.Sprintf("/proc/self/fd/%d", etcFile.Fd())
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID, "size=256k,nr_inodes=512,mode=0755"); err != nil {
		return fail(fmt.Errorf("mount template tmpfs: %w", err))
	}
	unix.Umask(0)
	for _, d := range append([]string{"dev", "proc"}, dirs...) {
		if err := unix.Mkdir(filepath.Join(root, d), 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fail(fmt.Errorf("mkdir %s: %w", d, err))
		}
	}
	for _, d := range devices {
		if err := unix.Mknod(filepath.Join(root, "dev", d.name), unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fail(fmt.Errorf("mknod /dev/%s: %w", d.name, err))
		}
	}
	for _, ln := range links {
		if err := unix.Symlink(ln.target, filepath.Join(root, ln.name)); err != nil {
			return fail(fmt.Errorf("symlink %s: %w", ln.name, err))
		}
	}
	// /etc is a small read-only tmpfs of its own, filled from etc: a copy
	// rather than a bind of the host directory, so that the job's mount
	// table shows its root as "/" and not as a path in the node's work
	// directory.
	etcDir := filepath.Join(root, "etc")
	if err := unix.Mount("tmpfs", etcDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16m,nr_inodes=4096,mode=0755"); err != nil {
		return fail(fmt.Errorf("mount etc tmpfs: %w", err))
	}
	ents, err := os.ReadDir(etc)
	if err != nil {
		return fail(fmt.Errorf("read etc: %w", err))
	}
	for _, ent := range ents {
		if err := copyTree(filepath.Join(etc, ent.Name()), filepath.Join(etcDir, ent.Name())); err != nil {
			return fail(fmt.Errorf("copy etc: %w", err))
		}
	}
	// A child forked meanwhile by another thread of the process (a job,
	// mkfs.btrfs for another executor) holds the files just written open
	// until it execs, and the kernel refuses a read-only remount until
	// then: try again a few times.
	remount := func() error {
		return unix.Mount("", etcDir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	}
	err = remount()
	for try := 0; errors.Is(err, unix.EBUSY) && try < 50; try++ {
		time.Sleep(2 * time.Millisecond)
		err = remount()
	}
	if err != nil {
		return fail(fmt.Errorf("make etc read-only: %w", err))
	}
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID, ""); err != nil {
		return fail(fmt.Errorf("make template read-only: %w", err))
	}
	// Cloned from the host's tree, which is still in view until the
	// pivot below.
	for _, b := range system {
		fd, err := b.clone()
		if err != nil {
			return fail(err)
		}
		err = unix.MoveMount(fd, "", unix.AT_FDCWD, filepath.Join(root, b.dst), unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(fd)
		if err != nil {
			return fail(fmt.Errorf("mount %s at /%s: %w", b.src, b.dst, err))
		}
	}
	// pivot_root(".", ".") stacks the old root on top of the new one; the
	// lazy unmount then takes the whole host tree out of the namespace.
	if err := unix.Chdir(root); err != nil {
		return fail(fmt.Errorf("chdir template: %w", err))
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fail(fmt.Errorf("pivot_root: %w", err))
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fail(fmt.Errorf("detach host root: %w", err))
	}
	return ns, nil
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

// writeZero writes "0" to each file: to a cgroup's "tasks", it moves the
// calling thread there.
func writeZero(fds []int) error {
	for _, fd := range fds {
		for {
			_, err := unix.Write(fd, []byte("0"))
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return err
			}
			break
		}
	}
	return nil
}

// loopbackUp brings up lo in a new network namespace, its only interface.
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

// restrict sets what the jobs inherit from this thread at fork: no new
// privileges through execve, an empty capability bounding set, the seccomp
// filter. The uid change in the child then clears every capability. None of
// it stops the thread itself from entering namespaces and mounting (its
// effective capabilities stay, and the filter refuses only user namespaces
// and keys), so it is done once, when the thread is new.
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
