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
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// limits is what a job's cgroup enforces.
type limits struct {
	memoryBytes int64   // 0: no limit
	cpu         float64 // cores; 0: no quota
	pids        int64   // 0: no limit
}

// usage is what a job's cgroup measured over its whole life.
type usage struct {
	cpuSeconds float64
	peakMemory int64
	oomKills   uint64
}

// jobCgroup is one job's cgroup in whichever hierarchy the host has. Its
// methods are safe for concurrent use.
type jobCgroup interface {
	// add moves a process (and so everything it starts later) into the cgroup.
	add(pid int) error
	// procs lists the processes in the cgroup.
	procs() ([]int, error)
	// freeze stops every process in the cgroup so that none can exit, fork or
	// have its pid reused while it is being signalled; thaw resumes them.
	// Both are no-ops where the host has no freezer.
	freeze() error
	thaw() error
	// usage reads the cgroup's counters.
	usage() (usage, error)
	// remove deletes the cgroup; it must be empty.
	remove() error
}

// cgroupDriver makes job cgroups under one parent.
type cgroupDriver interface {
	create(name string, l limits) (jobCgroup, error)
	// removeStale kills the processes of and removes every job cgroup whose
	// name ends in suffix, returning their names.
	removeStale(suffix string) ([]string, error)
	describe() string
}

// removeStaleDirs does removeStale in each parent directory (one per v1
// hierarchy, or the v2 parent).
func removeStaleDirs(parents []string, suffix string) ([]string, error) {
	seen := map[string]bool{}
	var names []string
	var errs []error
	for _, parent := range parents {
		ents, err := os.ReadDir(parent)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		for _, ent := range ents {
			n := ent.Name()
			if !ent.IsDir() || !strings.HasPrefix(n, "job-") || !strings.HasSuffix(n, suffix) {
				continue
			}
			dir := filepath.Join(parent, n)
			if ps, err := readPids(filepath.Join(dir, "cgroup.procs")); err == nil {
				for _, p := range ps {
					_ = syscall.Kill(p, syscall.SIGKILL)
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

// --- cgroup v1 ---

// v1Required are the controllers a job needs; freezer is optional.
var v1Required = []cgroup1.Name{cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Memory, cgroup1.Pids}

type cgroup1Driver struct {
	parent    cgroup1.Path
	hierarchy cgroup1.Hierarchy
	names     []string
	memsw     bool // the host accounts swap: memory.memsw.* exist
}

func newCgroup1Driver(parent string) (*cgroup1Driver, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 hierarchies: %w", err)
	}
	want := map[cgroup1.Name]bool{cgroup1.Freezer: true}
	for _, n := range v1Required {
		want[n] = true
	}
	var subsystems []cgroup1.Subsystem
	have := map[cgroup1.Name]bool{}
	var names []string
	for _, s := range all {
		if want[s.Name()] {
			subsystems = append(subsystems, s)
			have[s.Name()] = true
			names = append(names, string(s.Name()))
		}
	}
	for _, n := range v1Required {
		if !have[n] {
			return nil, fmt.Errorf("cgroup v1 controller %s is not mounted", n)
		}
	}
	d := &cgroup1Driver{
		// Nested under this process's own cgroup in every hierarchy, so that
		// whatever limits the node agent runs under also bound its jobs.
		parent:    cgroup1.NestedPath(parent),
		hierarchy: func() ([]cgroup1.Subsystem, error) { return subsystems, nil },
		names:     names,
	}
	for _, s := range subsystems {
		if s.Name() == cgroup1.Memory {
			p, ok := s.(interface{ Path(string) string })
			if ok {
				_, err := os.Stat(filepath.Join(p.Path("/"), "memory.memsw.limit_in_bytes"))
				d.memsw = err == nil
			}
		}
	}
	if _, err := d.parent(cgroup1.Memory); err != nil {
		return nil, fmt.Errorf("cgroup v1 parent %s: %w", parent, err)
	}
	return d, nil
}

func (d *cgroup1Driver) describe() string {
	p, _ := d.parent(cgroup1.Memory)
	return fmt.Sprintf("cgroup v1 (%s) under %s", strings.Join(d.names, ","), p)
}

func (d *cgroup1Driver) removeStale(suffix string) ([]string, error) {
	var parents []string
	subsystems, _ := d.hierarchy()
	for _, s := range subsystems {
		p, err := d.parent(s.Name())
		if err != nil {
			return nil, err
		}
		if ps, ok := s.(interface{ Path(string) string }); ok {
			parents = append(parents, ps.Path(p))
		}
	}
	return removeStaleDirs(parents, suffix)
}

func (d *cgroup1Driver) create(name string, l limits) (jobCgroup, error) {
	path := func(s cgroup1.Name) (string, error) {
		p, err := d.parent(s)
		if err != nil {
			return "", err
		}
		return filepath.Join(p, name), nil
	}
	res := &specs.LinuxResources{}
	if l.memoryBytes > 0 {
		// memsw = memory: the job gets no swap on hosts that have it.
		m := l.memoryBytes
		res.Memory = &specs.LinuxMemory{Limit: &m}
		if d.memsw {
			res.Memory.Swap = &m
		}
	}
	if l.cpu > 0 {
		quota := int64(l.cpu * cfsPeriod)
		quota = max(quota, 1000)
		period := uint64(cfsPeriod)
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if l.pids > 0 {
		res.Pids = &specs.LinuxPids{Limit: &l.pids}
	}
	cg, err := cgroup1.New(path, res, cgroup1.WithHierarchy(d.hierarchy))
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	j := &cgroup1Job{cg: cg, dirs: map[cgroup1.Name]string{}}
	for _, s := range cg.Subsystems() {
		p, err := path(s.Name())
		if err != nil {
			return nil, err
		}
		if ps, ok := s.(interface{ Path(string) string }); ok {
			j.dirs[s.Name()] = ps.Path(p)
		}
	}
	_, j.freezer = j.dirs[cgroup1.Freezer]
	return j, nil
}

// cgroup1Job uses the library to create the cgroup and to freeze it, and
// reads and removes it directly: the job's end is on every job's path, and
// the library's generic walks there cost more than the kernel work.
type cgroup1Job struct {
	cg      cgroup1.Cgroup
	dirs    map[cgroup1.Name]string // subsystem: directory of the job
	freezer bool
}

func (j *cgroup1Job) add(pid int) error { return j.cg.AddProc(uint64(pid)) }

func (j *cgroup1Job) procs() ([]int, error) {
	return readPids(filepath.Join(j.dirs[cgroup1.Pids], "cgroup.procs"))
}

func (j *cgroup1Job) freeze() error {
	if !j.freezer {
		return nil
	}
	return j.cg.Freeze()
}

func (j *cgroup1Job) thaw() error {
	if !j.freezer {
		return nil
	}
	return j.cg.Thaw()
}

func (j *cgroup1Job) usage() (usage, error) {
	var u usage
	ns, err := readUint(filepath.Join(j.dirs[cgroup1.Cpuacct], "cpuacct.usage"))
	if err != nil {
		return u, err
	}
	u.cpuSeconds = float64(ns) / 1e9
	peak, err := readUint(filepath.Join(j.dirs[cgroup1.Memory], "memory.max_usage_in_bytes"))
	if err != nil {
		return u, err
	}
	u.peakMemory = int64(peak)
	kv, err := readKV(filepath.Join(j.dirs[cgroup1.Memory], "memory.oom_control"))
	if err != nil {
		return u, err
	}
	u.oomKills = kv["oom_kill"]
	return u, nil
}

func (j *cgroup1Job) remove() error {
	var errs []error
	for name, dir := range j.dirs {
		if err := rmdirCgroup(dir); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
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

func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

func readKV(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
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
	return kv, nil
}

// --- cgroup v2 ---

type cgroup2Driver struct {
	parent string // group path below the unified mount, e.g. /e31
	swap   bool   // the kernel accounts swap: memory.swap.max exists
}

const unifiedMount = "/sys/fs/cgroup"

func newCgroup2Driver(parent string) (*cgroup2Driver, error) {
	// In v2 a cgroup with processes cannot hand controllers to its children, so
	// jobs live under a parent of their own (by default /e31 at the root)
	// rather than below the node agent's cgroup.
	group := filepath.Join("/", parent)
	if _, err := cgroup2.NewManager(unifiedMount, group, &cgroup2.Resources{
		CPU: &cgroup2.CPU{}, Memory: &cgroup2.Memory{}, Pids: &cgroup2.Pids{},
	}); err != nil {
		return nil, fmt.Errorf("cgroup v2 parent %s: %w", group, err)
	}
	_, err := os.Stat(filepath.Join(unifiedMount, group, "memory.swap.max"))
	return &cgroup2Driver{parent: group, swap: err == nil}, nil
}

func (d *cgroup2Driver) describe() string { return "cgroup v2 under " + d.parent }

func (d *cgroup2Driver) removeStale(suffix string) ([]string, error) {
	return removeStaleDirs([]string{filepath.Join(unifiedMount, d.parent)}, suffix)
}

func (d *cgroup2Driver) create(name string, l limits) (jobCgroup, error) {
	res := &cgroup2.Resources{CPU: &cgroup2.CPU{}, Memory: &cgroup2.Memory{}, Pids: &cgroup2.Pids{Max: -1}}
	if l.memoryBytes > 0 {
		m, zero := l.memoryBytes, int64(0)
		res.Memory.Max = &m
		if d.swap {
			res.Memory.Swap = &zero
		}
	}
	if l.cpu > 0 {
		quota := max(int64(l.cpu*cfsPeriod), 1000)
		period := uint64(cfsPeriod)
		res.CPU.Max = cgroup2.NewCPUMax(&quota, &period)
	}
	if l.pids > 0 {
		res.Pids.Max = l.pids
	}
	m, err := cgroup2.NewManager(unifiedMount, filepath.Join(d.parent, name), res)
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	return &cgroup2Job{m: m}, nil
}

type cgroup2Job struct{ m *cgroup2.Manager }

func (j *cgroup2Job) add(pid int) error { return j.m.AddProc(uint64(pid)) }

func (j *cgroup2Job) procs() ([]int, error) {
	ps, err := j.m.Procs(true)
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		out = append(out, int(p))
	}
	return out, nil
}

func (j *cgroup2Job) freeze() error { return j.m.Freeze() }
func (j *cgroup2Job) thaw() error   { return j.m.Thaw() }

func (j *cgroup2Job) usage() (usage, error) {
	m, err := j.m.StatFiltered(cgroup2.StatCPU | cgroup2.StatMemory | cgroup2.StatMemoryEvents)
	if err != nil {
		return usage{}, err
	}
	var u usage
	if m.CPU != nil {
		u.cpuSeconds = float64(m.CPU.UsageUsec) / 1e6
	}
	if m.Memory != nil {
		u.peakMemory = int64(m.Memory.MaxUsage)
	}
	if m.MemoryEvents != nil {
		u.oomKills = m.MemoryEvents.OomKill
	}
	return u, nil
}

func (j *cgroup2Job) remove() error { return j.m.Delete() }

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
	frozen := cg.freeze() == nil
	if ps, err := cg.procs(); err == nil {
		for _, p := range ps {
			_ = syscall.Kill(p, sig)
		}
	}
	if frozen {
		_ = cg.thaw()
	}
}
