//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
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
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/executor/internal/workspace"
	"github.com/e31net/e31/services/run/gpu"
)

// Executor is the default executor: each job in its own namespaces, root,
// cgroup and uid. It is safe for concurrent use; Prepare, Run and Release
// may be called for different jobs at once, and Close at any time.
type Executor struct {
	cfg     Config
	cgroups cgroupDriver
	etcDir  string
	// emptyDir is an empty directory, the lower layer under every job's
	// /data (see bind.overlay), unless bindData.
	emptyDir string
	// bindData says the jobs' /data is a bind mount: the node's work
	// directory cannot be an overlay's layer (probeOverlay).
	bindData bool
	// rootTag tells apart the cgroups of executors over different roots
	// (several nodes in one process) that hold the same job attempt.
	rootTag string
	capLast int
	filter  []unix.SockFilter
	// system are the system directories (Config.SystemDirs that are
	// directories), in mount order: mounted once, in the template.
	system []bind
	// template is a file descriptor of the mount namespace every job's root
	// is copied from; see buildTemplate.
	template int
	// devLinks are the links of the template's /dev, which a job holding
	// GPUs gets in a /dev of its own (see devNodes).
	devLinks []link
	// testNodes are device nodes a test has made in the /dev of every job
	// holding GPUs, which its cgroup does not allow (see devNodes).
	testNodes []gpu.Node
	// hostProc is the fallback for kernels without procfs pidns=; see probe.
	hostProc  bool
	launchers *launchers
	log       *slog.Logger

	mu   sync.Mutex
	jobs map[string]bool
	// idle are the slots no job holds, the longest idle first (see slot).
	idle   []*slot
	closed bool
	// disk holds the jobs' writable space, with a quota per job; nil
	// where the node could not make it (see openDisk): then a tmpfs.
	disk *workspace.Disk
}

var (
	_ executor.Executor = (*Executor)(nil)
	_ executor.Isolator = (*Executor)(nil)
)

// LimitsDevices implements executor.DeviceLimiter: whether the job
// cgroups refuse every device but a job's own (no, on a v1 host without
// the devices controller).
func (e *Executor) LimitsDevices() bool { return e.cgroups.limitsDevices() }

// Isolation implements executor.Isolator: every job is sandboxed.
func (e *Executor) Isolation() events.Isolation { return events.IsolationSandbox }

// IsolationOf implements executor.Isolator: sandbox, whatever the job.
func (e *Executor) IsolationOf(executor.Spec) events.Isolation { return events.IsolationSandbox }

// Check makes the first of New's checks, which changes nothing on the
// host: whether this process can sandbox jobs at all (it must be root).
// The error wraps ErrNotSupported.
func Check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: must run as root (euid is %d)", ErrNotSupported, os.Geteuid())
	}
	return nil
}

// New checks that the host can sandbox jobs (root, cgroups, namespaces, a
// /proc that can be mounted for another pid namespace) and returns an
// Executor. The error wraps ErrNotSupported and says what is missing.
func New(cfg Config) (*Executor, error) {
	if cfg.Root == "" {
		return nil, errors.New("sandbox: Config.Root is required")
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "e31"
	}
	if cfg.UIDBase == 0 {
		cfg.UIDBase = 2000000
	}
	if cfg.UIDCount == 0 {
		cfg.UIDCount = 4096
	}
	if cfg.PidsMax == 0 {
		cfg.PidsMax = 1024
	}
	if cfg.DefaultDiskBytes == 0 {
		cfg.DefaultDiskBytes = 1 << 30
	}
	if cfg.DefaultMemoryBytes == 0 {
		cfg.DefaultMemoryBytes = 1 << 30
	}
	if cfg.SystemDirs == nil {
		cfg.SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}
	}
	if cfg.EtcFiles == nil {
		cfg.EtcFiles = []string{"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime",
			"nsswitch.conf", "protocols", "services", "os-release", "debian_version"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := Check(); err != nil {
		return nil, err
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("sandbox: root %s: %w", cfg.Root, err)
	}
	cfg.Root = root
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("sandbox: make root: %w", err)
	}
	cg, err := newCgroupDriver(cfg.CgroupParent)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSupported, err)
	}
	launchers, err := newLaunchers(maxIdleLaunchers)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSupported, err)
	}
	if seccompFilter() == nil {
		return nil, fmt.Errorf("%w: no seccomp filter for %s", ErrNotSupported, runtime.GOARCH)
	}
	capLast, err := readInt("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSupported, err)
	}
	e := &Executor{
		cfg:     cfg,
		cgroups: cg,
		etcDir:  filepath.Join(root, fmt.Sprintf(".etc-%08x", crc32.ChecksumIEEE(fmt.Appendf(nil, "%d %d %q", cfg.UIDBase, cfg.UIDCount, cfg.EtcFiles)))),
		rootTag: fmt.Sprintf("%08x", crc32.ChecksumIEEE([]byte(root))),
		capLast: capLast,
		filter:  seccompFilter(),
		log:     cfg.Logger,

		launchers: launchers,
		jobs:      map[string]bool{},
	}
	var links []link
	for _, d := range cfg.SystemDirs {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		rel := strings.TrimPrefix(filepath.Clean(d), "/")
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(d)
			if err != nil {
				return nil, fmt.Errorf("sandbox: read link %s: %w", d, err)
			}
			links = append(links, link{name: rel, target: target})
		} else if fi.IsDir() {
			e.system = append(e.system, bind{src: d, dst: rel, readOnly: true})
		}
	}
	if err := e.makeEtc(); err != nil {
		return nil, err
	}
	e.emptyDir = filepath.Join(root, ".empty")
	if err := os.Mkdir(e.emptyDir, 0o555); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("sandbox: make empty layer: %w", err)
	}
	if err := probeOverlay(e.emptyDir); err != nil {
		// What the overlay hides is where the node keeps the data, not
		// the data: worth a line in the log, not a node that will not run.
		e.bindData = true
		e.log.Warn("the work directory cannot be an overlay's layer: jobs' /data is a bind mount, and their mount table shows its path on the node", "root", root, "err", err)
	}
	if err := e.probe(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSupported, err)
	}
	dirs := []string{"etc", "data", "out", "tmp"}
	for _, b := range e.system {
		dirs = append(dirs, b.dst)
	}
	e.devLinks = []link{
		{"dev/fd", "/proc/self/fd"}, {"dev/stdin", "/proc/self/fd/0"},
		{"dev/stdout", "/proc/self/fd/1"}, {"dev/stderr", "/proc/self/fd/2"},
		{"dev/shm", "/tmp"}}
	links = append(links, e.devLinks...)
	// Root itself is the template's mount point, in its namespace only.
	if e.template, err = buildTemplate(root, e.etcDir, dirs, links, e.system); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSupported, err)
	}
	// A node agent that died (SIGKILL, a crash) took its jobs with it
	// (PR_SET_PDEATHSIG), but not their workspaces and cgroups.
	if names, err := workspace.RemoveStale(root); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	} else if len(names) > 0 {
		e.log.Warn("removed stale workspaces", "names", names)
	}
	if names, err := cg.removeStale("-" + e.rootTag); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	} else if len(names) > 0 {
		e.log.Warn("removed stale job cgroups", "names", names)
	}
	e.openDisk()
	e.log.Info("sandbox ready", "root", root, "cgroups", cg.describe())
	return e, nil
}

// probe checks the two newest kernel features the sandbox uses. A procfs
// for a pid namespace other than the caller's ("pidns", Linux 6.18) gives
// the job a /proc of its own pid namespace. Without it, a kernel with
// per-mount procfs options (hidepid=invisible, Linux 5.8) still works in
// the fallback mode: the job gets a procfs of the host's pid namespace that
// shows only processes of its own uid — its own tree, under host pids.
func (e *Executor) probe() error {
	fs, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen proc (Linux 5.2): %w", err)
	}
	defer unix.Close(fs)
	ns, err := unix.Open("/proc/self/ns/pid", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open pid namespace: %w", err)
	}
	defer unix.Close(ns)
	if err := unix.FsconfigSetFd(fs, "pidns", ns); err == nil {
		return nil
	}
	if err := unix.FsconfigSetString(fs, "hidepid", "invisible"); err != nil {
		return fmt.Errorf("kernel has neither procfs pidns= (Linux 6.18) nor hidepid=invisible (Linux 5.8): %w", err)
	}
	e.hostProc = true
	e.log.Warn("kernel lacks procfs pidns= (Linux 6.18): jobs get the host's /proc limited to their own processes (hidepid=invisible), under host pids; tools that look up /proc/<getpid()>, such as ps, fail in jobs")
	return nil
}

// probeOverlay mounts (detached, and at once let go) a read-only overlay
// of two empty directories on the filesystem of empty: what every job's
// /data is made as.
func probeOverlay(empty string) error {
	dir, err := os.MkdirTemp(filepath.Dir(empty), ".probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	fs, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "lowerdir", dir+":"+empty); err != nil {
		return fmt.Errorf("overlay lowerdir: %w", err)
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return fmt.Errorf("create overlay: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY)
	if err != nil {
		return fmt.Errorf("fsmount overlay: %w", err)
	}
	return unix.Close(mnt)
}

// makeEtc fills the jobs' shared, read-only /etc. It is built aside and
// renamed into place, so that executors started at once over one root (and
// a previous run's copy) do not see a half-made one.
func (e *Executor) makeEtc() error {
	tmp, err := os.MkdirTemp(e.cfg.Root, ".etc-new-")
	if err != nil {
		return fmt.Errorf("sandbox: make etc: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("sandbox: make etc: %w", err)
	}
	for _, name := range e.cfg.EtcFiles {
		if err := copyTree(filepath.Join("/etc", name), filepath.Join(tmp, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sandbox: copy /etc/%s: %w", name, err)
		}
	}
	var passwd, group strings.Builder
	passwd.WriteString("root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
	group.WriteString("root:x:0:\nnogroup:x:65534:\n")
	for i := range e.cfg.UIDCount {
		id := e.cfg.UIDBase + i
		fmt.Fprintf(&passwd, "job:x:%d:%d:e31 job:/tmp:/bin/sh\n", id, id)
		fmt.Fprintf(&group, "job:x:%d:\n", id)
	}
	files := map[string]string{
		"passwd":   passwd.String(),
		"group":    group.String(),
		"hosts":    "127.0.0.1\tlocalhost e31\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"hostname": "e31\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("sandbox: write etc/%s: %w", name, err)
		}
	}
	if err := os.RemoveAll(e.etcDir); err != nil {
		return fmt.Errorf("sandbox: replace etc: %w", err)
	}
	if err := os.Rename(tmp, e.etcDir); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return nil // a concurrent New with the same config installed it
		}
		return fmt.Errorf("sandbox: install etc: %w", err)
	}
	return nil
}

// job is the executor's state of one prepared job.
type job struct {
	name  string
	slot  *slot
	ws    *workspace.Dir // the slot's, while the job holds it
	uid   int
	mem   int64     // the memory limit in force
	cg    jobCgroup // the slot's, while the job holds it
	spec  executor.Spec
	log   *slog.Logger
	e     *Executor
	guard executor.Guard
}

var _ executor.Job = (*job)(nil)

// Spec implements executor.Job.
func (j *job) Spec() executor.Spec { return j.spec }

// Dirs implements executor.Job: the slot's workspace.
func (j *job) Dirs() executor.Dirs {
	return executor.Dirs{Root: j.ws.Path, DataDir: j.ws.Data, OutDir: j.ws.Out}
}

// Run implements executor.Job: it starts the job in its sandbox and waits
// for it. It returns only once the job's cgroup is empty.
func (j *job) Run(ctx context.Context) (executor.Result, error) {
	return j.guard.Run(j.spec.JobID, func() (executor.Result, error) { return j.e.run(ctx, j) })
}

// Release implements executor.Job: it undoes Prepare and gives the slot
// back.
func (j *job) Release() error { return j.guard.Release(func() error { return j.e.release(j) }) }

// Prepare gives the job a slot (see slot) and readies it: the workspace's
// data/ (DataDir), empty, for RUN to stage into, the slot's writable space
// bounded at Spec.DiskBytes holding out/ (OutDir) and the job's /tmp, and
// the cgroup with the job's limits.
func (e *Executor) Prepare(ctx context.Context, spec executor.Spec) (executor.Job, error) {
	if spec.JobID == "" || len(spec.Command) == 0 {
		return nil, errors.New("sandbox: spec needs a job id and a command")
	}
	name := workspace.Name(spec.JobID, spec.Attempt)
	e.mu.Lock()
	if e.jobs[name] {
		e.mu.Unlock()
		return nil, fmt.Errorf("sandbox: job %s attempt %d is already prepared", spec.JobID, spec.Attempt)
	}
	uid, ok := workspace.TakeUID(e.cfg.UIDBase, e.cfg.UIDCount)
	if !ok {
		e.mu.Unlock()
		return nil, fmt.Errorf("sandbox: job %s: all %d job uids are in use", spec.JobID, e.cfg.UIDCount)
	}
	e.jobs[name] = true
	e.mu.Unlock()

	j := &job{
		name: name,
		uid:  uid,
		spec: spec,
		log:  e.log.With("job", spec.JobID, "attempt", spec.Attempt),
		e:    e,
	}
	if err := e.prepare(j); err != nil {
		if rerr := e.release(j); rerr != nil {
			j.log.Warn("clean up failed workspace", "err", rerr)
		}
		return nil, fmt.Errorf("sandbox: prepare %s: %w", spec.JobID, err)
	}
	return j, nil
}

func (e *Executor) prepare(j *job) error {
	s, err := e.takeSlot()
	if err != nil {
		return err
	}
	j.slot = s
	disk := j.spec.DiskBytes
	if disk <= 0 {
		disk = e.cfg.DefaultDiskBytes
	}
	if err := s.ws.Mount(disk, j.uid); err != nil {
		return err
	}
	j.ws = s.ws
	mem := j.spec.MemoryBytes
	if mem <= 0 {
		mem = e.cfg.DefaultMemoryBytes
	}
	j.mem = mem
	if len(j.spec.GPUs.Nodes) > 0 && !e.cgroups.limitsDevices() {
		return fmt.Errorf("the node has no devices cgroup (%s): it cannot keep a job to its own GPUs", e.cgroups.describe())
	}
	lim := limits{memoryBytes: mem, cpu: j.spec.CPU, pids: e.cfg.PidsMax, devices: j.spec.GPUs.Nodes}
	if s.cg != nil {
		if err := s.cg.reset(lim); err != nil {
			j.log.Warn("reset slot cgroup; making a new one", "err", err)
			if err := s.cg.remove(); err != nil {
				return fmt.Errorf("remove slot cgroup: %w", err)
			}
			s.cg = nil
		}
	}
	if s.cg == nil {
		if s.cg, err = e.cgroups.create(s.name+"-"+e.rootTag, lim); err != nil {
			return err
		}
	}
	j.cg = s.cg
	if s.net == nil {
		if s.net, err = newNetns(); err != nil {
			return err
		}
	}
	return nil
}

// LogPaths returns where the job's stdout and stderr are kept: files in its
// writable space (so they count against Spec.DiskBytes), readable until
// Release.
func LogPaths(j executor.Job) (stdout, stderr string) {
	return workspace.LogPaths(j.Dirs().Root)
}

func (e *Executor) run(ctx context.Context, j *job) (executor.Result, error) {
	spec := j.spec
	var files []*os.File
	var pipes *executor.Pipes
	if spec.Stdout != nil && spec.Stderr != nil {
		// RUN keeps the job's output: it goes there, through pipes, not
		// into files in the job's writable space, which are then not
		// made at all (two files made and removed per job on the job
		// disk).
		in, err := devNull()
		if err != nil {
			return executor.Result{}, fmt.Errorf("sandbox: run %s: %w", spec.JobID, err)
		}
		if pipes, err = executor.OpenPipes(spec.Stdout, spec.Stderr); err != nil {
			return executor.Result{}, fmt.Errorf("sandbox: run %s: %w", spec.JobID, err)
		}
		defer pipes.Close()
		files = []*os.File{in, pipes.Stdout, pipes.Stderr}
	} else {
		var err error
		if files, err = j.ws.Stdio(); err != nil {
			return executor.Result{}, fmt.Errorf("sandbox: run %s: %w", spec.JobID, err)
		}
		defer func() {
			for _, f := range files {
				f.Close()
			}
		}()
	}
	env, path := executor.Environ(spec, executor.Inside), executor.SearchPath(spec)
	// The system directories are in the template already: only the job's
	// workspace is mounted for it. From the executor's own record, not
	// from ws, whose fields RUN could change.
	binds := []bind{{src: j.ws.Out, dst: "out"}, {src: j.ws.Tmp, dst: "tmp"}}
	// A job given no data (most) gets the template's own /data, an empty
	// directory of its read-only tmpfs, the same to the job as an empty
	// overlay, which would cost a new overlay file system per job.
	noData, err := j.ws.DataEmpty()
	if err != nil {
		return executor.Result{}, fmt.Errorf("sandbox: run %s: %w", spec.JobID, err)
	}
	if !noData {
		binds = append(binds, bind{src: j.ws.Data, dst: "data", readOnly: true, overlay: !e.bindData, emptyDir: e.emptyDir})
	}
	l := &launch{
		template:  e.template,
		binds:     binds,
		argv:      spec.Command,
		env:       env,
		path:      path,
		uid:       j.uid,
		gid:       j.uid,
		files:     files,
		capLast:   e.capLast,
		filter:    e.filter,
		hostProc:  e.hostProc,
		netns:     j.slot.net.fd,
		enter:     j.cg.enterFiles(),
		leave:     e.cgroups.leaveFiles(),
		gpus:      spec.GPUs.Nodes,
		procDir:   spec.GPUs.ProcDir,
		held:      spec.GPUs.Held,
		params:    spec.GPUs.Params,
		links:     e.devLinks,
		unallowed: e.testNodes,
	}
	admitted := make(chan admitReq)
	l.admit = j.cg.admit
	if l.enter == nil {
		// The launcher thread no longer sees /sys: this one admits the job.
		l.admit = func(pid int) error {
			r := admitReq{pid: pid, err: make(chan error, 1)}
			admitted <- r
			return <-r.err
		}
	}
	startc := make(chan started, 1)
	donec := make(chan exited, 1)
	e.launchers.run(l, startc, donec)
	var st started
wait:
	for {
		select {
		case r := <-admitted:
			r.err <- j.cg.admit(r.pid)
		case st = <-startc:
			break wait
		}
	}
	if st.err != nil {
		return executor.Result{}, fmt.Errorf("sandbox: start %s: %w", spec.JobID, st.err)
	}
	if pipes != nil {
		pipes.Started()
	}
	res := executor.Result{Started: time.Now()}
	j.log.Debug("job started", "pid", st.pid, "uid", j.uid)

	ex, stop, _ := executor.Watch(ctx, spec, res.Started, donec, nil, executor.Signals{
		Term: func(why executor.Stop) {
			j.log.Info("stopping job", "outcome", why.Outcome, "reason", why.Reason)
			killAll(j.cg, syscall.SIGTERM)
		},
		Kill: func() {
			// SIGKILL to pid 1 makes the kernel kill its whole pid namespace.
			_ = syscall.Kill(st.pid, syscall.SIGKILL)
			killAll(j.cg, syscall.SIGKILL)
		},
	})
	res.Outcome, res.Reason = stop.Outcome, stop.Reason
	if ex.err != nil {
		j.log.Error("wait for job", "err", ex.err)
	}
	if err := drain(j.cg, func(left []int) {
		j.log.Warn("job processes outlive pid 1", "pids", left)
	}); err != nil {
		return res, fmt.Errorf("sandbox: run %s: %w", spec.JobID, err)
	}
	if pipes != nil {
		// Every process of the job is gone: the pipes end once read.
		pipes.Wait(2 * time.Second)
	}
	res.Stopped = time.Now()
	u, err := j.cg.usage()
	if err != nil {
		j.log.Warn("read job usage", "err", err)
	}
	res.Usage = events.Usage{CPUSeconds: u.cpuSeconds, MaxRSSBytes: u.peakMemory}
	if stop.Outcome == "" {
		switch ws := ex.status; {
		case ex.err != nil:
			res.Outcome = events.Failed
			res.Reason = fmt.Sprintf("lost the job's exit status: %v", ex.err)
		case u.oomKills > 0:
			res.Outcome = events.OutOfMemory
			res.Reason = fmt.Sprintf("out of memory: %d process(es) killed at the %d-byte limit", u.oomKills, j.mem)
			if ws.Exited() {
				code := ws.ExitStatus()
				res.ExitCode = &code
			}
		case ws.Exited():
			code := ws.ExitStatus()
			res.ExitCode = &code
			res.Outcome = events.Succeeded
			if code != 0 {
				res.Outcome = events.Failed
				res.Reason = fmt.Sprintf("exited with code %d", code)
			}
		case ws.Signaled():
			res.Outcome = events.Failed
			res.Reason = fmt.Sprintf("killed by signal %s", unix.SignalName(ws.Signal()))
		default:
			res.Outcome = events.Failed
			res.Reason = fmt.Sprintf("unexpected wait status %#x", uint32(ws))
		}
	}
	executor.CheckDisk(&res, j.ws, j.log)
	j.log.Info("job stopped", "outcome", res.Outcome, "reason", res.Reason,
		"cpu_seconds", res.Usage.CPUSeconds, "peak_memory", res.Usage.MaxRSSBytes)
	return res, nil
}

type admitReq struct {
	pid int
	err chan error
}

// release undoes Prepare and gives the slot back. It refuses while a
// process of the job is alive. It is called once: through the job's guard,
// or by a Prepare that failed.
func (e *Executor) release(j *job) error {
	var errs []error
	if j.cg != nil {
		if ps, err := j.cg.procs(); err == nil && len(ps) > 0 {
			// Only possible if Run was never called or did not finish.
			killAll(j.cg, syscall.SIGKILL)
			if err := drain(j.cg, func(left []int) { j.log.Warn("job processes survive release", "pids", left) }); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Survivors would still be in the slot's namespace and cgroup and could
	// write to its tmpfs: then the slot is left as it is, never reused.
	if s := j.slot; s != nil && len(errs) == 0 {
		if err := e.clearSlot(s, j.log); err != nil {
			// Not fit for another job (its workspace was removed under it,
			// say): it goes, and only if that fails does the release.
			j.log.Warn("slot not reused", "slot", s.name, "err", err)
			if err := s.remove(); err != nil {
				errs = append(errs, fmt.Errorf("remove slot: %w", err))
			}
		} else {
			e.putSlot(s, j.log)
		}
	}
	e.mu.Lock()
	if len(errs) == 0 {
		workspace.FreeUID(j.uid)
		delete(e.jobs, j.name)
	}
	e.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox: release %s: %w", j.spec.JobID, err)
	}
	return nil
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// copyTree copies a file, symlink or directory tree.
func copyTree(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, ent := range ents {
			if err := copyTree(filepath.Join(src, ent.Name()), filepath.Join(dst, ent.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	default:
		return nil
	}
}

var _ executor.Snapshotter = (*job)(nil)

// Snapshot implements executor.Snapshotter: the job's cgroup is frozen
// while a read-only btrfs snapshot of its writable space is taken, so that
// no process of it writes half a file into the copy, and thawed at once
// (the pause is the snapshot's transaction, milliseconds). On a tmpfs
// space it returns executor.ErrNoSnapshot without freezing anything.
func (j *job) Snapshot() (string, time.Duration, func() error, error) {
	if !j.ws.Quota() {
		return "", 0, nil, executor.ErrNoSnapshot
	}
	// What the job wrote so far goes to disk while it runs: the freeze
	// then waits only for what it writes meanwhile.
	if err := j.ws.Flush(); err != nil {
		return "", 0, nil, fmt.Errorf("snapshot %s: %w", j.spec.JobID, err)
	}
	start := time.Now()
	ferr := j.cg.freeze()
	var snap *workspace.Snapshot
	var err error
	if ferr == nil {
		snap, err = j.ws.Snapshot()
	}
	// Thawed whatever happened: a cgroup left frozen stops the job for good.
	terr := j.cg.thaw()
	paused := time.Since(start)
	if err = errors.Join(ferr, err, terr); err != nil {
		if snap != nil {
			err = errors.Join(err, snap.Remove())
		}
		return "", paused, nil, fmt.Errorf("snapshot %s: %w", j.spec.JobID, err)
	}
	return snap.Out, paused, snap.Remove, nil
}
