//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// cgroup2Driver makes job cgroups with containerd/cgroups. They are not
// reused: memory.peak cannot be reset for all readers, so each job gets a
// new one (see jobCgroup.reset), and a thread cannot join a v2 cgroup
// without its process, so the job is moved in after its execve (see
// jobCgroup.admit).
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

func (d *cgroup2Driver) leaveFiles() []int { return nil }

func (d *cgroup2Driver) limitsDevices() bool { return true }

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
		quota := cfsQuota(l.cpu)
		period := uint64(cfsPeriod)
		res.CPU.Max = cgroup2.NewCPUMax(&quota, &period)
	}
	if l.pids > 0 {
		res.Pids.Max = l.pids
	}
	// An eBPF program attached to the job's cgroup: every device but
	// those of its /dev is refused (see deviceRules).
	res.Devices = deviceRules(l.devices)
	m, err := cgroup2.NewManager(unifiedMount, filepath.Join(d.parent, name), res)
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	return &cgroup2Job{m: m}, nil
}

type cgroup2Job struct{ m *cgroup2.Manager }

func (j *cgroup2Job) reset(limits) error { return errNotReusable }
func (j *cgroup2Job) idle() bool         { return false }
func (j *cgroup2Job) enterFiles() []int  { return nil }

func (j *cgroup2Job) admit(pid int) error { return j.m.AddProc(uint64(pid)) }

func (j *cgroup2Job) procs() ([]int, error) {
	ps, err := j.m.Procs(true)
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		if int(p) != self {
			out = append(out, int(p))
		}
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
