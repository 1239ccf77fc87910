package gpu

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// Probe is what NVML tells about a device beyond the driver's listing: the
// compute processes on it, its utilisation and memory now. Its methods may
// be called concurrently.
type Probe interface {
	// ComputeProcesses lists the pids of the compute processes on the
	// device (host pids). An error means the device cannot be asked: it
	// fell off the bus, say.
	ComputeProcesses(uuid string) ([]int, error)
	// Sample reads the device's utilisation (percent of time a kernel ran,
	// over NVML's last sample period) and the memory in use now.
	Sample(uuid string) (utilization float64, memoryUsed int64, err error)
	// MemoryBytes is the device's memory.
	MemoryBytes(uuid string) (int64, error)
	// Close lets NVML go.
	Close() error
}

// ErrNoNVML is OpenProbe's answer on a node without NVML: a binary built
// without it (the default, CGO_ENABLED=0), or a host without the
// library. Such a node records no utilisation and cannot see compute
// processes left on a device.
var ErrNoNVML = errors.New("gpu: NVML is not available (build with -tags nvml and cgo on a host with libnvidia-ml)")

// Health says why a device must stop taking jobs, "" when it need not: the
// driver no longer lists it as it did (Listed), or NVML (probe, nil
// without) reports it failed or finds compute processes on it. It is asked
// after a job's cgroup is empty, so a process left is nobody's that e31
// knows: a zombie holding memory, or a process that escaped.
func Health(root string, probe Probe, dev events.Device) string {
	if why := Listed(root, dev); why != "" {
		return why
	}
	if probe == nil {
		return ""
	}
	pids, err := probe.ComputeProcesses(dev.UUID)
	if err != nil {
		return fmt.Sprintf("NVML cannot read it: %v", err)
	}
	if len(pids) > 0 {
		sort.Ints(pids)
		s := make([]string, len(pids))
		for i, p := range pids {
			s[i] = fmt.Sprint(p)
		}
		return fmt.Sprintf("%d compute process(es) still on it (pid %s)", len(pids), strings.Join(s, ", "))
	}
	return ""
}

// Meter samples the devices of one job through a probe while it runs, for
// RunStopped's per-device usage. Its goroutine is its own: Stop waits for
// it.
type Meter struct {
	probe Probe
	uuids []string
	stop  chan struct{}
	done  chan struct{}

	mu   sync.Mutex
	sums []meterSum
}

type meterSum struct {
	util    float64
	peak    int64
	samples int
}

// StartMeter samples uuids every period until Stop; with no probe or no
// device it measures nothing, and Stop returns nil.
func StartMeter(probe Probe, uuids []string, every time.Duration) *Meter {
	m := &Meter{probe: probe, uuids: uuids, stop: make(chan struct{}), done: make(chan struct{}), sums: make([]meterSum, len(uuids))}
	if probe == nil || len(uuids) == 0 {
		close(m.done)
		return m
	}
	go func() {
		defer close(m.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			m.sample()
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *Meter) sample() {
	for i, u := range m.uuids {
		util, used, err := m.probe.Sample(u)
		if err != nil {
			continue
		}
		m.mu.Lock()
		s := &m.sums[i]
		s.util += util
		s.peak = max(s.peak, used)
		s.samples++
		m.mu.Unlock()
	}
}

// Stop ends the sampling and returns what each device did: nil where
// nothing was measured (no NVML), and no entry for a device that never
// answered.
func (m *Meter) Stop() []events.DeviceUsage {
	if m.probe == nil || len(m.uuids) == 0 {
		return nil
	}
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []events.DeviceUsage
	for i, u := range m.uuids {
		s := m.sums[i]
		if s.samples == 0 {
			continue
		}
		out = append(out, events.DeviceUsage{UUID: u, UtilizationPercent: s.util / float64(s.samples), MemoryPeakBytes: s.peak, Samples: s.samples})
	}
	return out
}
