package executor

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/gpu"
)

// GPUs is what a job holding devices is given, and what is kept from a
// job holding none, worked out by RUN from its hold and the node's driver
// (gpu.Driver) so that every executor gives the same.
type GPUs struct {
	// Held are the devices the job holds, in bus order: the order CUDA
	// numbers them in (CUDA_DEVICE_ORDER=PCI_BUS_ID), 0 to N-1.
	Held []events.Device
	// Nodes are the device nodes the job's /dev holds (gpu.Driver.Nodes):
	// the held devices' and the driver's shared ones; none for a job
	// holding no device. The devices cgroup allows these and refuses
	// every other device.
	Nodes []gpu.Node
	// ProcDir is where the node's driver lists its devices
	// (/proc/driver/nvidia/gpus under the node's GPU root): in the job's
	// /proc that directory is covered by an empty one holding only the
	// held devices' entries, taken from here, as nvidia-container-toolkit
	// does; "" where the node has no driver.
	ProcDir string
	// Params is a file on the node holding the driver's
	// /proc/driver/nvidia/params with ModifyDeviceFiles: 0, mounted over
	// the job's, so that CUDA in the job never tries to make the device
	// nodes it was not given; "" where the node has no driver.
	Params string
}

// DeviceLimiter is implemented by executors that may be unable to keep a
// job to its own devices on this host: LimitsDevices reports whether they
// can. A node whose executor cannot offers no GPU.
type DeviceLimiter interface {
	LimitsDevices() bool
}

// LimitsDevices reports whether e can keep a job to its own devices; an
// executor that does not say is taken to (the process executor isolates
// nothing anyway, and says so with its isolation).
func LimitsDevices(e Executor) bool {
	if l, ok := e.(DeviceLimiter); ok {
		return l.LimitsDevices()
	}
	return true
}

// UUIDs are the held devices' UUIDs, in the job's order.
func (g GPUs) UUIDs() []string {
	out := make([]string, len(g.Held))
	for i, d := range g.Held {
		out[i] = d.UUID
	}
	return out
}

// Env sets, in env, what a job is told of its devices, over anything it
// declared of the same names: holding N, CUDA_VISIBLE_DEVICES=0,…,N-1 (the
// job's own numbering: no other device is visible to it),
// CUDA_DEVICE_ORDER=PCI_BUS_ID and E31_GPU_UUIDS (the UUIDs, in that
// order); holding none, NVIDIA_VISIBLE_DEVICES=void, so that a CUDA image
// that defaults to "all" gets nothing from a container runtime, and no
// CUDA_ variable.
func (g GPUs) Env(env map[string]string) {
	if len(g.Held) == 0 {
		env["NVIDIA_VISIBLE_DEVICES"] = "void"
		delete(env, "CUDA_VISIBLE_DEVICES")
		delete(env, "E31_GPU_UUIDS")
		return
	}
	idx := make([]string, len(g.Held))
	for i := range g.Held {
		idx[i] = strconv.Itoa(i)
	}
	env["CUDA_VISIBLE_DEVICES"] = strings.Join(idx, ",")
	env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
	env["E31_GPU_UUIDS"] = strings.Join(g.UUIDs(), ",")
	delete(env, "NVIDIA_VISIBLE_DEVICES")
}

// GPUsFor is what a job holding held (the UUIDs of its hold) is given on
// a node whose driver is d and which offers offered; params is the node's
// rewritten params file (see GPUs.Params).
func GPUsFor(d gpu.Driver, offered []events.Device, held []string, params string) GPUs {
	var g GPUs
	for _, dev := range offered {
		if slices.Contains(held, dev.UUID) {
			g.Held = append(g.Held, dev)
		}
	}
	slices.SortFunc(g.Held, func(a, b events.Device) int { return strings.Compare(a.Bus, b.Bus) })
	g.Nodes = d.Nodes(g.Held)
	if d.Major != 0 {
		g.Params = params
		g.ProcDir = filepath.Join(d.Root, "proc/driver/nvidia/gpus")
	}
	return g
}
