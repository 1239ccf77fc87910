//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containerd/cgroups/v3/cgroup1"

	"github.com/e31net/e31/services/run/gpu"
)

// v1Required are the controllers a job needs; freezer is optional.
var v1Required = []cgroup1.Name{cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Memory, cgroup1.Pids}

// cgroup1Driver finds the hierarchies with containerd/cgroups and then
// handles the job cgroups itself: they are reused from job to job (reset and
// idle), their hot files are kept open, and the launcher thread moves
// itself in and out through "tasks" (enterFiles), none of which the library
// does.
type cgroup1Driver struct {
	// parents is the directory of the job cgroups' parent in each hierarchy.
	parents map[cgroup1.Name]string
	// leave holds this process's own cgroups' "tasks", one per distinct
	// hierarchy directory.
	leave   []int
	names   []string
	memsw   bool // the host accounts swap: memory.memsw.* exist
	freezer bool
	devices bool // the devices controller is mounted
}

func (d *cgroup1Driver) limitsDevices() bool { return d.devices }

func newCgroup1Driver(parent string) (*cgroup1Driver, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 hierarchies: %w", err)
	}
	want := map[cgroup1.Name]bool{cgroup1.Freezer: true, cgroup1.Devices: true}
	for _, n := range v1Required {
		want[n] = true
	}
	d := &cgroup1Driver{parents: map[cgroup1.Name]string{}}
	// Nested under this process's own cgroup in every hierarchy, so that
	// whatever limits the node agent runs under also bound its jobs.
	own := cgroup1.NestedPath("")
	seen := map[string]bool{}
	for _, s := range all {
		p, ok := s.(interface{ Path(string) string })
		if !want[s.Name()] || !ok {
			continue
		}
		rel, err := own(s.Name())
		if err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: own cgroup: %w", s.Name(), err)
		}
		dir := p.Path(filepath.Join(rel, parent))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup v1 parent %s: %w", dir, err)
		}
		d.parents[s.Name()] = dir
		d.names = append(d.names, string(s.Name()))
		if ownDir := p.Path(rel); !seen[ownDir] {
			seen[ownDir] = true
			f, err := openAt(ownDir, "tasks", unix.O_WRONLY)
			if err != nil {
				return nil, fmt.Errorf("cgroup v1 %s: %w", s.Name(), err)
			}
			d.leave = append(d.leave, f.fd)
		}
	}
	for _, n := range v1Required {
		if _, ok := d.parents[n]; !ok {
			return nil, fmt.Errorf("cgroup v1 controller %s is not mounted", n)
		}
	}
	_, d.freezer = d.parents[cgroup1.Freezer]
	_, d.devices = d.parents[cgroup1.Devices]
	_, err = os.Stat(filepath.Join(d.parents[cgroup1.Memory], "memory.memsw.limit_in_bytes"))
	d.memsw = err == nil
	return d, nil
}

func (d *cgroup1Driver) describe() string {
	return fmt.Sprintf("cgroup v1 (%s) under %s", strings.Join(d.names, ","), d.parents[cgroup1.Memory])
}

func (d *cgroup1Driver) leaveFiles() []int { return d.leave }

func (d *cgroup1Driver) removeStale(suffix string) ([]string, error) {
	var parents []string
	for _, p := range d.parents {
		parents = append(parents, p)
	}
	return removeStaleDirs(parents, suffix)
}

func (d *cgroup1Driver) create(name string, l limits) (jobCgroup, error) {
	j := &cgroup1Job{dirs: map[cgroup1.Name]string{}, memsw: d.memsw}
	j.cpuUsage, j.memPeak, j.memUsage, j.oomControl, j.cpuQuota, j.pidsCurrent =
		fileAt{fd: -1}, fileAt{fd: -1}, fileAt{fd: -1}, fileAt{fd: -1}, fileAt{fd: -1}, fileAt{fd: -1}
	fail := func(err error) (jobCgroup, error) {
		_ = j.remove()
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	made := map[string]bool{}
	for _, n := range []cgroup1.Name{cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Memory, cgroup1.Pids, cgroup1.Freezer, cgroup1.Devices} {
		parent, ok := d.parents[n]
		if !ok {
			continue
		}
		dir := filepath.Join(parent, name)
		j.dirs[n] = dir
		if made[dir] {
			continue // cpu and cpuacct mounted together
		}
		if err := unix.Mkdir(dir, 0o755); err != nil {
			return fail(fmt.Errorf("mkdir %s: %w", dir, err))
		}
		made[dir] = true
		j.uniq = append(j.uniq, dir)
		t, err := openAt(dir, "tasks", unix.O_WRONLY)
		if err != nil {
			return fail(err)
		}
		j.tasks = append(j.tasks, t.fd)
	}
	var err error
	open := func(f *fileAt, n cgroup1.Name, file string, flags int) {
		if err == nil {
			*f, err = openAt(j.dirs[n], file, flags)
		}
	}
	open(&j.cpuUsage, cgroup1.Cpuacct, "cpuacct.usage", unix.O_RDWR)
	open(&j.memPeak, cgroup1.Memory, "memory.max_usage_in_bytes", unix.O_RDWR)
	open(&j.memUsage, cgroup1.Memory, "memory.usage_in_bytes", unix.O_RDONLY)
	open(&j.cpuQuota, cgroup1.Cpu, "cpu.cfs_quota_us", unix.O_WRONLY)
	open(&j.pidsCurrent, cgroup1.Pids, "pids.current", unix.O_RDONLY)
	open(&j.oomControl, cgroup1.Memory, "memory.oom_control", unix.O_RDONLY)
	if err != nil {
		return fail(err)
	}
	if err := j.set(cgroup1.Cpu, "cpu.cfs_period_us", strconv.Itoa(cfsPeriod)); err != nil {
		return fail(err)
	}
	if err := j.reset(l); err != nil {
		return fail(err)
	}
	return j, nil
}

// cgroup1Job is a job cgroup in every v1 hierarchy the job needs.
type cgroup1Job struct {
	dirs  map[cgroup1.Name]string // subsystem: directory of the job
	uniq  []string                // the distinct directories
	tasks []int                   // their "tasks" files
	memsw bool

	// The counters, kept open. (Not cgroup.procs: read again through the
	// same file, it can still list processes that are gone.)
	cpuUsage, memPeak, memUsage, oomControl, cpuQuota, pidsCurrent fileAt

	// lim is what the cgroup enforces, once isSet; oomBase is the OOM kill
	// count when it was last reset. Only reset writes them, and it runs
	// while no other method does (Prepare, before the job is known).
	lim     limits
	isSet   bool
	oomBase uint64
	// memBase is the peak memory reset left (what was charged then).
	memBase uint64
	// quotaOn is whether admit set the cpu quota; reset takes it off.
	// Neither runs while the other does.
	quotaOn bool
	// froze is set by freeze; idle makes sure the next job is not born
	// frozen.
	froze atomic.Bool
}

func (j *cgroup1Job) set(n cgroup1.Name, file, value string) error {
	p := filepath.Join(j.dirs[n], file)
	if err := os.WriteFile(p, []byte(value), 0); err != nil {
		return fmt.Errorf("set %s: %w", p, err)
	}
	return nil
}

func (j *cgroup1Job) reset(l limits) error {
	if !j.isSet || l.memoryBytes != j.lim.memoryBytes {
		if err := j.setMemory(l.memoryBytes); err != nil {
			return err
		}
	}
	// No quota until admit: see jobCgroup.admit.
	if !j.isSet || j.quotaOn {
		if err := j.cpuQuota.write("-1"); err != nil {
			return err
		}
		j.quotaOn = false
	}
	if !j.isSet || l.pids != j.lim.pids {
		v := "max"
		if l.pids > 0 {
			v = strconv.FormatInt(l.pids, 10)
		}
		if err := j.set(cgroup1.Pids, "pids.max", v); err != nil {
			return err
		}
	}
	if _, ok := j.dirs[cgroup1.Devices]; ok && (!j.isSet || !slices.Equal(l.devices, j.lim.devices)) {
		if err := j.setDevices(l.devices); err != nil {
			return err
		}
	}
	j.lim, j.isSet = l, true
	// The counters: cpu time to zero, the peaks to what is charged now
	// (at most idleMemory), which usage then subtracts. The OOM kill count
	// cannot be reset; usage reports what it adds.
	if err := j.cpuUsage.write("0"); err != nil {
		return err
	}
	if err := j.memPeak.write("0"); err != nil {
		return err
	}
	base, err := j.memPeak.uint()
	if err != nil {
		return err
	}
	j.memBase = base
	b, err := j.oomControl.readSmall()
	if err != nil {
		return err
	}
	j.oomBase = parseKV(b)["oom_kill"]
	return nil
}

// setDevices makes the cgroup refuse every device but those of every
// job's /dev and extra (see deviceRules): "a" to devices.deny, which
// clears what the last job was allowed, then each node to devices.allow.
func (j *cgroup1Job) setDevices(extra []gpu.Node) error {
	deny, allow := v1Lines(deviceRules(extra))
	if err := j.set(cgroup1.Devices, "devices.deny", deny); err != nil {
		return err
	}
	for _, a := range allow {
		if err := j.set(cgroup1.Devices, "devices.allow", a); err != nil {
			return err
		}
	}
	return nil
}

// setMemory sets the memory limit and, where the host accounts swap, the
// memory+swap limit to the same value, so the job gets no swap. The kernel
// keeps memsw ≥ memory at every step: raise memsw first, lower it last.
func (j *cgroup1Job) setMemory(m int64) error {
	v := "-1"
	if m > 0 {
		v = strconv.FormatInt(m, 10)
	}
	if !j.memsw {
		return j.set(cgroup1.Memory, "memory.limit_in_bytes", v)
	}
	unlimited := !j.isSet || j.lim.memoryBytes <= 0
	if m > 0 && (unlimited || m < j.lim.memoryBytes) {
		if err := j.set(cgroup1.Memory, "memory.limit_in_bytes", v); err != nil {
			return err
		}
		return j.set(cgroup1.Memory, "memory.memsw.limit_in_bytes", v)
	}
	if err := j.set(cgroup1.Memory, "memory.memsw.limit_in_bytes", v); err != nil {
		return err
	}
	return j.set(cgroup1.Memory, "memory.limit_in_bytes", v)
}

// idleMemory is how much memory may stay charged to an empty job cgroup for
// it to serve the next job. What stays is the kernel's: charges batched
// ahead per CPU, the page cache of files the job was first to read, the
// dentries and inodes it looked up. A trivial job leaves a few hundred KiB;
// more, and memory.force_empty reclaims it (about half a millisecond, so
// not after every job). The next job's peak memory is counted from what
// stays (see reset), so it is known to within this much.
const idleMemory = 1 << 20

func (j *cgroup1Job) idle() bool {
	if j.froze.Swap(false) {
		if dir, ok := j.dirs[cgroup1.Freezer]; ok {
			_ = j.thaw()
			b, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
			if err != nil || strings.TrimSpace(string(b)) != "THAWED" {
				return false
			}
		}
	}
	u, err := j.memUsage.uint()
	if err != nil {
		return false
	}
	if u > idleMemory {
		// Reclaim what the job left charged (only allowed while the cgroup
		// is empty, which it now is). Pages nothing can reclaim, such as a
		// tmpfs the job's last thread still holds, keep it above the mark.
		if err := j.set(cgroup1.Memory, "memory.force_empty", "0"); err != nil {
			return false
		}
		if u, err = j.memUsage.uint(); err != nil {
			return false
		}
	}
	return u <= idleMemory
}

func (j *cgroup1Job) enterFiles() []int { return j.tasks }

func (j *cgroup1Job) admit(int) error {
	if j.lim.cpu <= 0 {
		return nil
	}
	if err := j.cpuQuota.write(strconv.FormatInt(cfsQuota(j.lim.cpu), 10)); err != nil {
		return err
	}
	j.quotaOn = true
	return nil
}

func (j *cgroup1Job) procs() ([]int, error) {
	// Nearly always empty when asked: the task count says so for a tenth
	// of the cost of listing.
	if n, err := j.pidsCurrent.uint(); err == nil && n == 0 {
		return nil, nil
	}
	return readPids(filepath.Join(j.dirs[cgroup1.Pids], "cgroup.procs"))
}

func (j *cgroup1Job) freeze() error {
	dir, ok := j.dirs[cgroup1.Freezer]
	if !ok {
		return nil
	}
	j.froze.Store(true)
	state := filepath.Join(dir, "freezer.state")
	// Freezing is not instant: the state reads FREEZING until every task
	// has stopped. Writing FROZEN again retries those that were busy.
	for i := 0; i < 1000; i++ {
		if err := os.WriteFile(state, []byte("FROZEN"), 0); err != nil {
			return err
		}
		b, err := os.ReadFile(state)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) == "FROZEN" {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return errors.New("freeze: still not frozen after a second")
}

func (j *cgroup1Job) thaw() error {
	dir, ok := j.dirs[cgroup1.Freezer]
	if !ok {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0)
}

func (j *cgroup1Job) usage() (usage, error) {
	var u usage
	ns, err := j.cpuUsage.uint()
	if err != nil {
		return u, err
	}
	u.cpuSeconds = float64(ns) / 1e9
	peak, err := j.memPeak.uint()
	if err != nil {
		return u, err
	}
	if peak > j.memBase {
		u.peakMemory = int64(peak - j.memBase)
	}
	b, err := j.oomControl.readSmall()
	if err != nil {
		return u, err
	}
	if k := parseKV(b)["oom_kill"]; k > j.oomBase {
		u.oomKills = k - j.oomBase
	}
	return u, nil
}

func (j *cgroup1Job) remove() error {
	for _, f := range []*fileAt{&j.cpuUsage, &j.memPeak, &j.memUsage, &j.oomControl, &j.cpuQuota, &j.pidsCurrent} {
		f.close()
	}
	for _, fd := range j.tasks {
		unix.Close(fd)
	}
	j.tasks = nil
	var errs []error
	for _, dir := range j.uniq {
		if err := rmdirCgroup(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}
