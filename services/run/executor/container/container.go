//go:build linux

package container

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/executor/internal/workspace"
)

// Config configures an Executor. The zero value of every field but Root
// means its default.
type Config struct {
	// Root is the directory under which job workspaces are made.
	// One node's sandbox and container executors may share a Root; two
	// nodes must not (a workspace found for a job attempt being prepared is
	// taken for a stale one and removed).
	Root string
	// Client talks to the engine. Default: from the environment (DOCKER_HOST
	// or the local socket), negotiating the API version.
	Client *client.Client
	// CgroupParent is the cgroup under which each job's container gets a
	// parent of its own (cgroupfs driver only). Default /e31-docker.
	CgroupParent string
	// UIDBase and UIDCount are the uids jobs run as. Defaults 2000000, 4096.
	UIDBase, UIDCount int
	// PidsMax is every job's process limit. Default 1024.
	PidsMax int64
	// DiskBytes is the size of the node's job disk, the btrfs file system
	// with a quota per job that holds jobs' /out and /tmp (see
	// workspace.Disk; shared with a sandbox executor over the same Root,
	// and made by whichever opens it first). Default 20 GiB; -1: none, and
	// every job's /out and /tmp is a tmpfs, whose pages count against its
	// memory limit.
	DiskBytes int64
	// DefaultDiskBytes and DefaultMemoryBytes apply to a Spec that leaves
	// DiskBytes or MemoryBytes at 0. Default 1 GiB each.
	DefaultDiskBytes, DefaultMemoryBytes int64
	// ShmBytes is the size of the container's /dev/shm. Default 64 MiB.
	ShmBytes int64
	// Logger receives the executor's logs. Default slog.Default().
	Logger *slog.Logger
	// Images says which images each submitter's jobs may run (the
	// operator's policy, a limits.Book). SUBMIT rejects a job naming any
	// other; the node refuses it again, so that a job that reached it some
	// other way cannot run another tenant's private image. Nil: every image
	// present (for a node whose only jobs SUBMIT checked).
	Images Images
}

// Images gives a submitter's limits, among them the images it may run
// (limits.Lookup, limits.Book). Implementations are safe for concurrent
// use.
type Images interface {
	Limits(ctx context.Context, submitter string) (limits.Limits, error)
}

// ErrImageNotAllowed is returned by Prepare and Run for a job naming an
// image the policy does not allow its submitter.
var ErrImageNotAllowed = errors.New("container: image not allowed")

// Executor runs jobs as containers. It is safe for concurrent use.
type Executor struct {
	// rootTag labels this executor's containers (by its root), so that a
	// restarted node agent finds what its predecessor left running.
	rootTag   string
	cfg       Config
	cli       *client.Client
	cgroupsV2 bool
	usage     bool // the engine uses cgroupfs: job cgroup parents work
	// cdiDirs are where the engine reads CDI specs; none where it does
	// not (see devices.go).
	cdiDirs []string
	log     *slog.Logger
	// mu guards disk, which Close gives back.
	mu sync.Mutex
	// disk holds the jobs' writable space, with a quota per job; nil
	// where the node has none (then it is a tmpfs).
	disk *workspace.Disk
}

var _ executor.Executor = (*Executor)(nil)

// The labels of job containers.
const (
	jobLabel  = "net.e31.job"
	rootLabel = "net.e31.root"
)

// ErrNotSupported is returned by New when there is no usable engine.
var ErrNotSupported = errors.New("container: no usable container engine")

// ErrNoImage is returned by Run for a job without an image.
var ErrNoImage = errors.New("container: job names no image")

// New connects to the engine and returns an Executor; the error wraps
// ErrNotSupported when the engine cannot be reached.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	if cfg.Root == "" {
		return nil, errors.New("container: Config.Root is required")
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "/e31-docker"
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
	if cfg.ShmBytes == 0 {
		cfg.ShmBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: must run as root to make workspaces", ErrNotSupported)
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("container: root %s: %w", cfg.Root, err)
	}
	cfg.Root = root
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, fmt.Errorf("container: make root: %w", err)
	}
	cli := cfg.Client
	if cli == nil {
		cli, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotSupported, err)
		}
	}
	info, err := cli.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSupported, err)
	}
	e := &Executor{
		rootTag:   fmt.Sprintf("%08x", crc32.ChecksumIEEE([]byte(root))),
		cfg:       cfg,
		cli:       cli,
		cgroupsV2: info.CgroupVersion == "2",
		usage:     info.CgroupDriver == "cgroupfs",
		cdiDirs:   info.CDISpecDirs,
		log:       cfg.Logger,
	}
	e.openDisk()
	if !e.usage {
		e.log.Warn("container engine does not use the cgroupfs driver: job usage will not be measured", "driver", info.CgroupDriver)
	}
	// Containers do not die with the node agent: remove any a previous one
	// over this root left running.
	stale, err := cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", rootLabel+"="+e.rootTag))})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("container: list stale containers: %w", err), e.Close())
	}
	for _, c := range stale {
		e.log.Warn("removing stale job container", "id", c.ID, "job", c.Labels[jobLabel])
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return nil, errors.Join(fmt.Errorf("container: remove stale container %s: %w", c.ID, err), e.Close())
		}
	}
	e.log.Info("container executor ready", "engine", info.ServerVersion, "api", cli.ClientVersion(), "cgroup_driver", info.CgroupDriver)
	return e, nil
}

type job struct {
	name   string
	uid    int
	spec   executor.Spec
	ws     *workspace.Dir
	parent string // cgroup parent of the container
	id     string // container id once created
	log    *slog.Logger
	e      *Executor
	guard  executor.Guard
}

var _ executor.Job = (*job)(nil)

// Spec implements executor.Job.
func (j *job) Spec() executor.Spec { return j.spec }

// Dirs implements executor.Job.
func (j *job) Dirs() executor.Dirs {
	return executor.Dirs{Root: j.ws.Path, DataDir: j.ws.Data, OutDir: j.ws.Out}
}

// Run implements executor.Job: it runs the job's container and waits for
// it to end.
func (j *job) Run(ctx context.Context) (executor.Result, error) {
	return j.guard.Run(j.spec.JobID, func() (executor.Result, error) {
		if j.spec.Image == "" {
			return executor.Result{}, ErrNoImage
		}
		if err := j.e.allowed(ctx, j.spec); err != nil {
			return executor.Result{}, err
		}
		return j.e.run(ctx, j)
	})
}

// Release implements executor.Job: it removes the container (if Run left
// it), the cgroup parent and the workspace.
func (j *job) Release() error { return j.guard.Release(func() error { return j.e.release(j) }) }

// Prepare makes the job's workspace: data/ for RUN to stage into and a
// writable space of Spec.DiskBytes holding out/ and the job's /tmp: a
// subvolume of the node's job disk with a quota of the bound, or a tmpfs
// where there is no job disk.
func (e *Executor) Prepare(ctx context.Context, spec executor.Spec) (executor.Job, error) {
	if spec.JobID == "" || len(spec.Command) == 0 {
		return nil, errors.New("container: spec needs a job id and a command")
	}
	if err := e.allowed(ctx, spec); err != nil {
		return nil, err
	}
	uid, ok := workspace.TakeUID(e.cfg.UIDBase, e.cfg.UIDCount)
	if !ok {
		return nil, fmt.Errorf("container: job %s: all %d job uids are in use", spec.JobID, e.cfg.UIDCount)
	}
	name := workspace.Name(spec.JobID, spec.Attempt)
	j := &job{
		name:   name,
		uid:    uid,
		spec:   spec,
		parent: filepath.Join(e.cfg.CgroupParent, name),
		log:    e.log.With("job", spec.JobID, "attempt", spec.Attempt),
		e:      e,
	}
	disk := spec.DiskBytes
	if disk <= 0 {
		disk = e.cfg.DefaultDiskBytes
	}
	d, err := e.makeWorkspace(name, disk, uid)
	j.ws = d
	if err != nil {
		if rerr := e.release(j); rerr != nil {
			j.log.Warn("clean up failed workspace", "err", rerr)
		}
		return nil, fmt.Errorf("container: prepare %s: %w", spec.JobID, err)
	}
	return j, nil
}

// LogPaths returns where the job's stdout and stderr are kept until Release.
func LogPaths(j executor.Job) (stdout, stderr string) {
	return workspace.LogPaths(j.Dirs().Root)
}

// allowed refuses an image the policy does not allow the job's submitter,
// and any image while the policy cannot be read.
func (e *Executor) allowed(ctx context.Context, spec executor.Spec) error {
	if e.cfg.Images == nil || spec.Image == "" {
		return nil
	}
	l, err := e.cfg.Images.Limits(ctx, spec.Submitter)
	if err != nil {
		return fmt.Errorf("container: job %s: the images allowed to %s: %w", spec.JobID, spec.Submitter, err)
	}
	if p := l.ImageProblem(spec.Image); p != "" {
		return fmt.Errorf("%w: job %s: %s", ErrImageNotAllowed, spec.JobID, p)
	}
	return nil
}

func (e *Executor) run(ctx context.Context, j *job) (executor.Result, error) {
	spec := j.spec
	// The engine calls outlive a cancelled ctx: stopping is our business.
	bg := context.WithoutCancel(ctx)
	mem := spec.MemoryBytes
	if mem <= 0 {
		mem = e.cfg.DefaultMemoryBytes
	}
	pids := e.cfg.PidsMax
	cfg := &container.Config{
		Image:           spec.Image,
		Entrypoint:      spec.Command[:1],
		Cmd:             spec.Command[1:],
		Env:             withEnv(executor.Environ(spec, executor.Inside), "NVIDIA_VISIBLE_DEVICES", visibleDevices(spec.GPUs)),
		User:            fmt.Sprintf("%d:%d", j.uid, j.uid),
		WorkingDir:      "/tmp",
		Hostname:        "e31",
		NetworkDisabled: true,
		Labels:          map[string]string{jobLabel: spec.JobID, "net.e31.attempt": strconv.Itoa(spec.Attempt), rootLabel: e.rootTag},
	}
	host := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ShmSize:        e.cfg.ShmBytes,
		LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "1"}},
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: j.ws.Data, Target: "/data", ReadOnly: true},
			{Type: mount.TypeBind, Source: j.ws.Out, Target: "/out"},
			{Type: mount.TypeBind, Source: j.ws.Tmp, Target: "/tmp"},
		},
		Resources: container.Resources{
			Memory:     mem,
			MemorySwap: mem,
			PidsLimit:  &pids,
		},
	}
	if spec.CPU > 0 {
		host.Resources.NanoCPUs = int64(spec.CPU * 1e9)
	}
	var names map[string]string
	if len(e.cdiDirs) > 0 {
		names = cdiNames(e.cdiDirs)
	}
	host.Resources.DeviceRequests = deviceRequests(spec.GPUs, names)
	if e.usage {
		host.Resources.CgroupParent = j.parent
	}
	created, err := e.cli.ContainerCreate(bg, cfg, host, nil, nil, "e31-"+j.name)
	if err != nil {
		return executor.Result{}, fmt.Errorf("container: create %s: %w", spec.JobID, err)
	}
	j.id = created.ID
	defer func() {
		if err := e.cli.ContainerRemove(bg, j.id, container.RemoveOptions{Force: true}); err != nil {
			j.log.Warn("remove container", "err", err)
		} else {
			j.id = ""
		}
	}()
	// RUN keeps the job's output as it is written: attached before the
	// start, the stream misses nothing, and it ends when the container does.
	var attached chan struct{}
	if spec.Stdout != nil && spec.Stderr != nil {
		hj, err := e.cli.ContainerAttach(bg, j.id, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
		if err != nil {
			return executor.Result{}, fmt.Errorf("container: attach to %s: %w", spec.JobID, err)
		}
		defer hj.Close()
		attached = make(chan struct{})
		go func() {
			defer close(attached)
			if _, err := stdcopy.StdCopy(spec.Stdout, spec.Stderr, hj.Reader); err != nil {
				j.log.Warn("copy container output", "err", err)
			}
		}()
	}
	waitc, errc := e.cli.ContainerWait(bg, j.id, container.WaitConditionNextExit)
	if err := e.cli.ContainerStart(bg, j.id, container.StartOptions{}); err != nil {
		return executor.Result{}, fmt.Errorf("container: start %s: %w", spec.JobID, err)
	}
	res := executor.Result{Started: time.Now()}
	w, stop, err := executor.Watch(ctx, spec, res.Started, waitc, errc, executor.Signals{
		Term: func(why executor.Stop) {
			j.log.Info("stopping job", "outcome", why.Outcome, "reason", why.Reason)
			if err := e.cli.ContainerKill(bg, j.id, "SIGTERM"); err != nil {
				j.log.Warn("signal container", "err", err)
			}
		},
		Kill: func() {
			if err := e.cli.ContainerKill(bg, j.id, "SIGKILL"); err != nil {
				j.log.Warn("kill container", "err", err)
			}
		},
	})
	res.Outcome, res.Reason = stop.Outcome, stop.Reason
	if err != nil {
		return res, fmt.Errorf("container: wait for %s: %w", spec.JobID, err)
	}
	if w.Error != nil && w.Error.Message != "" {
		j.log.Warn("wait for container", "err", w.Error.Message)
	}
	res.Stopped = time.Now()
	info, err := e.cli.ContainerInspect(bg, j.id)
	if err != nil {
		return res, fmt.Errorf("container: inspect %s: %w", spec.JobID, err)
	}
	if info.State.Running {
		return res, fmt.Errorf("container: %s reported an exit but is running", spec.JobID)
	}
	if attached != nil {
		select {
		case <-attached:
		case <-time.After(2 * time.Second):
			j.log.Warn("the container's output stream did not end with it")
		}
	} else {
		e.copyLogs(bg, j)
	}
	if e.usage {
		u, err := readUsage(e.cgroupsV2, j.parent)
		if err != nil {
			j.log.Warn("read job usage", "err", err)
		}
		res.Usage = u
	}
	if stop.Outcome == "" {
		code := info.State.ExitCode
		switch {
		case info.State.OOMKilled || killedAtLimit(code, res.Usage.MaxRSSBytes, mem):
			res.Outcome = events.OutOfMemory
			res.Reason = fmt.Sprintf("out of memory at the %d-byte limit", mem)
		case code == 0:
			res.Outcome = events.Succeeded
			res.ExitCode = &code
		default:
			res.Outcome = events.Failed
			res.ExitCode = &code
			res.Reason = fmt.Sprintf("exited with code %d", code)
		}
	}
	executor.CheckDisk(&res, j.ws, j.log)
	j.log.Info("job stopped", "outcome", res.Outcome, "reason", res.Reason,
		"cpu_seconds", res.Usage.CPUSeconds, "peak_memory", res.Usage.MaxRSSBytes)
	return res, nil
}

// killedAtLimit reports whether a container that exited by SIGKILL, which
// e31 did not send, had its memory at the limit: the kernel's OOM killer.
// The engine's own OOMKilled flag is not enough: Docker 20.10 on cgroup v1
// sets it from an OOM event that may arrive after the exit it caused, and
// then the kill reads as an ordinary exit code 137.
func killedAtLimit(code int, peak, limit int64) bool {
	const slack = 1 << 20 // the parent's peak may differ from the container's by a few pages
	return code == 128+int(syscall.SIGKILL) && peak > 0 && peak >= limit-slack
}

// copyLogs writes the container's stdout and stderr into the workspace.
func (e *Executor) copyLogs(ctx context.Context, j *job) {
	files, err := j.ws.Stdio()
	if err != nil {
		j.log.Warn("open job logs", "err", err)
		return
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	rc, err := e.cli.ContainerLogs(ctx, j.id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		j.log.Warn("read container logs", "err", err)
		return
	}
	defer rc.Close()
	if _, err := stdcopy.StdCopy(files[1], files[2], rc); err != nil {
		j.log.Warn("copy container logs", "err", err)
	}
}

// readUsage reads the counters of the job's cgroup parent, which include
// those of its (now removed) container.
func readUsage(v2 bool, parent string) (events.Usage, error) {
	if v2 {
		m, err := cgroup2.Load(parent)
		if err != nil {
			return events.Usage{}, err
		}
		st, err := m.StatFiltered(cgroup2.StatCPU | cgroup2.StatMemory)
		if err != nil {
			return events.Usage{}, err
		}
		var u events.Usage
		if st.CPU != nil {
			u.CPUSeconds = float64(st.CPU.UsageUsec) / 1e6
		}
		if st.Memory != nil {
			u.MaxRSSBytes = int64(st.Memory.MaxUsage)
		}
		return u, nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(parent))
	if err != nil {
		return events.Usage{}, err
	}
	st, err := cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return events.Usage{}, err
	}
	var u events.Usage
	if st.CPU != nil && st.CPU.Usage != nil {
		u.CPUSeconds = float64(st.CPU.Usage.Total) / 1e9
	}
	if st.Memory != nil && st.Memory.Usage != nil {
		u.MaxRSSBytes = int64(st.Memory.Usage.Max)
	}
	return u, nil
}

// release removes the container (if Run left it), the cgroup parent and the
// workspace. It is called once: through the job's guard, or by a Prepare
// that failed.
func (e *Executor) release(j *job) error {
	var errs []error
	ctx := context.Background()
	if j.id != "" {
		if err := e.cli.ContainerRemove(ctx, j.id, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container: %w", err))
		}
	}
	if e.usage && len(errs) == 0 {
		if err := removeCgroup(e.cgroupsV2, j.parent); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup parent: %w", err))
		}
	}
	if j.ws != nil && len(errs) == 0 {
		if err := j.ws.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		workspace.FreeUID(j.uid)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("container: release %s: %w", j.spec.JobID, err)
	}
	return nil
}

func removeCgroup(v2 bool, parent string) error {
	if cgroups.Mode() == cgroups.Unified || v2 {
		m, err := cgroup2.Load(parent)
		if err != nil {
			return nil
		}
		return m.Delete()
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(parent))
	if errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return nil
	}
	if err != nil {
		return err
	}
	return cg.Delete()
}
