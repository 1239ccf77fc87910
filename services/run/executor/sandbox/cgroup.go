//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containerd/cgroups/v3"

	"github.com/e31net/e31/services/run/gpu"
)

// limits is what a job's cgroup enforces.
type limits struct {
	memoryBytes int64   // 0: no limit
	cpu         float64 // cores; 0: no quota
	pids        int64   // 0: no limit
	// devices are the device nodes the job may open beyond every job's
	// (its GPUs'): see deviceRules.
	devices []gpu.Node
}

// usage is what a job's cgroup measured over the job's life.
type usage struct {
	cpuSeconds float64
	peakMemory int64
	oomKills   uint64
}

// jobCgroup is the cgroup of a slot (see slot), in whichever hierarchy the
// host has: one job's at a time. Its methods are safe for concurrent use.
type jobCgroup interface {
	// reset readies the cgroup, empty, for the next job: limits l in force
	// and counters that count from zero, so that usage is the next job's
	// alone. It fails with errNotReusable where a cgroup cannot be reset.
	reset(l limits) error
	// idle is called once the cgroup is empty after a job: it gives back
	// what the job left charged to it and reports whether the cgroup can
	// serve another job (reset) or must be removed.
	idle() bool
	// enterFiles are open "tasks" files, one per hierarchy, to which a
	// thread writes "0" to move itself (alone, not its process) into the
	// cgroup, so that the job it forks is born there; nil where the host
	// cannot (v2 keeps a process's threads together).
	enterFiles() []int
	// admit is called while the job's first process is stopped right after
	// its execve, before its first instruction. Where the job was not born
	// in the cgroup (enterFiles is nil) it moves the process in, on a thread
	// that sees /sys; where it was, it only switches the cpu quota on, which
	// the fork and execve (the node agent's work as much as the job's) ran
	// without, as they ran outside the cgroup before jobs were born in it:
	// with a quota of a hundredth of a core, an execve alone would take the
	// job a second. Any thread may call it then.
	admit(pid int) error
	// procs lists the processes in the cgroup, never this one's (see
	// enterFiles).
	procs() ([]int, error)
	// freeze stops every process in the cgroup so that none can exit, fork or
	// have its pid reused while it is being signalled; thaw resumes them.
	// Both are no-ops where the host has no freezer.
	freeze() error
	thaw() error
	// usage reads the counters reset last zeroed.
	usage() (usage, error)
	// remove deletes the cgroup; it must be empty.
	remove() error
}

// errNotReusable is returned by jobCgroup.reset where a cgroup serves one
// job only.
var errNotReusable = errors.New("cgroup cannot be reused")

// cgroupDriver makes job cgroups under one parent.
type cgroupDriver interface {
	create(name string, l limits) (jobCgroup, error)
	// leaveFiles are open "tasks" files of this process's own cgroups, to
	// which a thread that entered a job's cgroup (jobCgroup.enterFiles)
	// writes "0" to leave it; nil where enterFiles is.
	leaveFiles() []int
	// removeStale kills the processes of and removes every job cgroup whose
	// name ends in suffix, returning their names. It also removes the empty
	// slot cgroups of node agents that are no longer running.
	removeStale(suffix string) ([]string, error)
	describe() string
	// limitsDevices reports whether the job cgroups refuse the devices
	// limits do not allow: false on a v1 host without the devices
	// controller, where no job may hold a GPU.
	limitsDevices() bool
}

// slotPrefix starts the names of slot cgroups and workspaces, followed by
// the pid of the process that made them (see slotName). workspace.Name
// never makes an '@', so no job's name can take the form.
const slotPrefix = "job-@"

// slotOwner is the pid in a slot cgroup's name, or 0.
func slotOwner(name string) int {
	rest, ok := strings.CutPrefix(name, slotPrefix)
	if !ok {
		return 0
	}
	pid, _, _ := strings.Cut(rest, ".")
	n, err := strconv.Atoi(pid)
	if err != nil {
		return 0
	}
	return n
}

// removeStaleDirs does removeStale in each parent directory (one per v1
// hierarchy, or the v2 parent).
func removeStaleDirs(parents []string, suffix string) ([]string, error) {
	seen := map[string]bool{}
	var names []string
	var errs []error
	self := os.Getpid()
	for _, parent := range parents {
		ents, err := os.ReadDir(parent)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		for _, ent := range ents {
			n := ent.Name()
			if !ent.IsDir() || !strings.HasPrefix(n, "job-") {
				continue
			}
			dir := filepath.Join(parent, n)
			if !strings.HasSuffix(n, suffix) {
				// Another root's. Its slots outlive their jobs, and a node
				// agent that is gone (no process of its pid) left them
				// behind; if they are empty they go. Never kill here: the
				// pid may be of another pid namespace.
				if owner := slotOwner(n); owner > 0 && owner != self && syscall.Kill(owner, 0) == syscall.ESRCH {
					_ = unix.Rmdir(dir)
				}
				continue
			}
			if ps, err := readPids(filepath.Join(dir, "cgroup.procs")); err == nil {
				for _, p := range ps {
					if p != self {
						_ = syscall.Kill(p, syscall.SIGKILL)
					}
				}
			}
			if err := rmdirCgroup(dir); err != nil {
				errs = append(errs, fmt.Errorf("remove stale cgroup %s: %w", dir, err))
				continue
			}
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names, errors.Join(errs...)
}

// cfsPeriod is the CFS bandwidth period (µs) of every job: a job with cpu c
// may run c×100 ms per 100 ms of wall time.
const cfsPeriod = 100000

// cfsQuota is the CFS quota (µs per period) for cpu cores, -1 for none.
func cfsQuota(cpu float64) int64 {
	if cpu <= 0 {
		return -1
	}
	return max(int64(cpu*cfsPeriod), 1000)
}

// newCgroupDriver picks cgroup v2 when the unified hierarchy is the only one,
// v1 otherwise (also in hybrid mode, where the controllers live in v1).
func newCgroupDriver(parent string) (cgroupDriver, error) {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return newCgroup2Driver(parent)
	case cgroups.Legacy, cgroups.Hybrid:
		return newCgroup1Driver(parent)
	default:
		return nil, errors.New("no cgroup hierarchy is mounted at /sys/fs/cgroup")
	}
}

// rmdirCgroup removes an empty cgroup directory. The kernel may report EBUSY
// for a moment after the last process left.
func rmdirCgroup(dir string) error {
	delay := time.Millisecond
	for i := 0; ; i++ {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || i == 8 {
			return err
		}
		time.Sleep(delay)
		delay *= 2
	}
}

// parsePids parses a cgroup.procs listing, leaving out this process: one
// of its threads is in a job's cgroup for a moment while it forks the job
// (see jobCgroup.enterFiles), and it must never be taken for the job's.
func parsePids(b []byte, what string) ([]int, error) {
	var out []int
	self := os.Getpid()
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", what, err)
		}
		if p != self {
			out = append(out, p)
		}
	}
	return out, nil
}

func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parsePids(b, path)
}

func parseUint(b []byte, what string) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", what, err)
	}
	return v, nil
}

func parseKV(b []byte) map[string]uint64 {
	kv := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			kv[k] = n
		}
	}
	return kv
}

// drain waits until cg has no process left, killing whatever it finds there
// (after the job's pid 1 is gone the kernel has already killed the rest of
// its pid namespace, so this normally returns at once). It gives up only when
// the cgroup cannot be read.
func drain(cg jobCgroup, warn func(left []int)) error {
	delay := time.Millisecond
	lastWarn := time.Now()
	for {
		left, err := cg.procs()
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil // removed, which the kernel allows only when empty
		}
		if err != nil {
			return fmt.Errorf("list job processes: %w", err)
		}
		if len(left) == 0 {
			return nil
		}
		if time.Since(lastWarn) > 5*time.Second {
			warn(left)
			lastWarn = time.Now()
		}
		killAll(cg, syscall.SIGKILL)
		time.Sleep(delay)
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// killAll sends sig to every process in cg, with the cgroup frozen so that no
// listed pid can exit and be reused by an unrelated process meanwhile.
func killAll(cg jobCgroup, sig syscall.Signal) {
	_ = cg.freeze()
	if ps, err := cg.procs(); err == nil {
		for _, p := range ps {
			_ = syscall.Kill(p, sig)
		}
	}
	// Thawed even if freezing failed half-way: a cgroup left FREEZING
	// would stop the job for good.
	_ = cg.thaw()
}

// fileAt is a cgroup file kept open: the job's end is on every job's path,
// and a pread costs a fraction of an open, read and close.
type fileAt struct {
	fd   int
	name string
}

func openAt(dir, name string, flags int) (fileAt, error) {
	p := filepath.Join(dir, name)
	fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return fileAt{fd: -1}, fmt.Errorf("open %s: %w", p, err)
	}
	return fileAt{fd: fd, name: p}, nil
}

// readSmall reads a file of one short value or a few lines in one call.
func (f fileAt) readSmall() ([]byte, error) {
	var buf [256]byte
	return f.readAll(buf[:])
}

// readAll reads the whole file in one read from offset 0 into buf, and
// fails rather than return a part when buf is too small: kernel files
// (cgroup, /proc/net) make their whole text on such a read.
func (f fileAt) readAll(buf []byte) ([]byte, error) {
	for {
		n, err := unix.Pread(f.fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f.name, err)
		}
		if n == len(buf) {
			return nil, fmt.Errorf("read %s: longer than %d bytes", f.name, len(buf))
		}
		return buf[:n], nil
	}
}

func (f fileAt) write(s string) error {
	for {
		_, err := unix.Pwrite(f.fd, []byte(s), 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write %q to %s: %w", s, f.name, err)
		}
		return nil
	}
}

func (f fileAt) uint() (uint64, error) {
	b, err := f.readSmall()
	if err != nil {
		return 0, err
	}
	return parseUint(b, f.name)
}

func (f *fileAt) close() {
	if f.fd >= 0 {
		unix.Close(f.fd)
		f.fd = -1
	}
}
