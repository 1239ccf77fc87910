package events

import (
	"slices"
	"strconv"
	"strings"
)

// Devices: a node's GPUs, held one by one.
//
// A node announces each of its GPUs (NodeAnnounced.Devices), by the UUID
// its driver gives it. RENT holds whole devices: a ComputeHeld names the
// UUIDs it holds (Hold.GPUs), and every event of the attempt carries them
// with the rest of the hold. A device that goes bad (compute processes
// left on it after a job, or the driver reports it failed) is withdrawn by
// its node (DeviceWithdrawn) and offered again once healthy
// (DeviceRestored); RENT places nothing on a withdrawn device.

// Device is one GPU a node offers. UUID is its identity everywhere (RENT,
// the hold record, the job's E31_GPU_UUIDS); Minor is its device node on
// the node (/dev/nvidia<minor>), which means nothing on another node.
type Device struct {
	UUID  string `json:"uuid"`
	Minor int    `json:"minor"`
	// Model is the driver's name of it ("NVIDIA H100 80GB HBM3").
	Model string `json:"model,omitempty"`
	// Bus is its PCI bus location ("0000:1b:00.0"), which orders a node's
	// devices as CUDA_DEVICE_ORDER=PCI_BUS_ID does.
	Bus string `json:"bus,omitempty"`
	// MemoryBytes is its memory, absent where the node cannot read it
	// without NVML.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// DeviceUsage is what one held device measurably did during an attempt,
// read through NVML while the job ran. A node without NVML records none
// rather than guessing.
type DeviceUsage struct {
	UUID string `json:"uuid"`
	// UtilizationPercent is the mean share of time a kernel ran on it, from
	// 0 to 100, over the samples taken.
	UtilizationPercent float64 `json:"utilization_percent"`
	// MemoryPeakBytes is the most device memory in use at any sample.
	MemoryPeakBytes int64 `json:"memory_peak_bytes"`
	// Samples is how many samples the figures come from.
	Samples int `json:"samples"`
}

// DeviceWithdrawn records that a node stopped offering one of its devices:
// after a job, compute processes were left on it or the driver reports it
// failed, or the node started without it. RENT places nothing on it until
// a DeviceRestored for it, or an announcement of a later boot that lists it.
type DeviceWithdrawn struct {
	Node string `json:"node"`
	// Boot is the node's boot that saw it: a withdrawal of an older boot
	// than the node's last announcement changes nothing.
	Boot   string `json:"boot"`
	Device string `json:"device"`
	Reason string `json:"reason"`
	// Change counts the withdrawals and restorations of this device in
	// this boot, from 1: it makes the event's id, so that a retried
	// publish is stored once and a second withdrawal is not taken for it.
	Change int `json:"change"`
}

// DeviceRestored records that a node offers a withdrawn device again: it
// has seen it healthy (no compute process on it, the driver lists it).
type DeviceRestored struct {
	Node   string `json:"node"`
	Boot   string `json:"boot"`
	Device string `json:"device"`
	Reason string `json:"reason,omitempty"`
	Change int    `json:"change"`
}

// The versioned type names of the device events.
const (
	TypeDeviceWithdrawn = "e31.node.device_withdrawn.v1"
	TypeDeviceRestored  = "e31.node.device_restored.v1"
)

func (*DeviceWithdrawn) Type() string { return TypeDeviceWithdrawn }
func (*DeviceRestored) Type() string  { return TypeDeviceRestored }

func (*DeviceWithdrawn) sealed() {}
func (*DeviceRestored) sealed()  {}

// A device event is a node's: stored on e31.node.<node>.<token> (see
// storedOn and SubjectOf, which take the node's events by boot()).
func (d DeviceWithdrawn) boot() string { return d.Boot }
func (d DeviceWithdrawn) node() string { return d.Node }
func (d DeviceRestored) node() string  { return d.Node }
func (d DeviceRestored) boot() string  { return d.Boot }

// change is the part of a device event's id after its token (see ID):
// "<boot>.<device>.<change>".
func (d DeviceWithdrawn) change() string { return changeID(d.Boot, d.Device, d.Change) }
func (d DeviceRestored) change() string  { return changeID(d.Boot, d.Device, d.Change) }

func changeID(boot, device string, n int) string {
	return boot + "." + device + "." + strconv.Itoa(n)
}

// DeviceStates folds the node events into which devices each node has
// withdrawn, and why: what the metrics and the page show, read the one
// way RENT reads it (an announcement starts a node's devices afresh; a
// device event of another boot than the node's last announcement changes
// nothing). Apply the node events in log order. It is not safe for
// concurrent use.
type DeviceStates struct {
	boot      map[string]string            // node: its last announced boot
	withdrawn map[string]map[string]string // node: device: reason
}

// NewDeviceStates returns an empty fold.
func NewDeviceStates() *DeviceStates {
	return &DeviceStates{boot: map[string]string{}, withdrawn: map[string]map[string]string{}}
}

// Apply folds one event in; it reports whether ev was a node's device
// event or an announcement, which change the states.
func (s *DeviceStates) Apply(ev Event) bool {
	switch e := ev.(type) {
	case *NodeAnnounced:
		// Copies: what is decoded shares the message's buffer.
		s.boot[strings.Clone(e.Node)] = strings.Clone(e.Boot)
		delete(s.withdrawn, e.Node)
		return true
	case *DeviceWithdrawn:
		if b, ok := s.boot[e.Node]; ok && b != e.Boot {
			return false
		}
		m := s.withdrawn[e.Node]
		if m == nil {
			m = map[string]string{}
			s.withdrawn[strings.Clone(e.Node)] = m
		}
		m[strings.Clone(e.Device)] = strings.Clone(e.Reason)
		return true
	case *DeviceRestored:
		if b, ok := s.boot[e.Node]; ok && b != e.Boot {
			return false
		}
		delete(s.withdrawn[e.Node], e.Device)
		return true
	}
	return false
}

// Withdrawn returns the withdrawn devices of node, with why each was.
func (s *DeviceStates) Withdrawn(node string) map[string]string { return s.withdrawn[node] }

// SameHold reports whether a and b name the same attempt and resources,
// devices and their order included. (Hold is no longer comparable with ==
// since it lists its devices.)
func SameHold(a, b Hold) bool {
	return a.Attempt == b.Attempt && a.Node == b.Node && a.CPU == b.CPU && a.MemoryBytes == b.MemoryBytes &&
		a.GPU == b.GPU && a.DiskBytes == b.DiskBytes && slices.Equal(a.GPUs, b.GPUs)
}
