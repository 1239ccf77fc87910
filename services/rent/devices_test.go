package rent_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/rent"
)

// gpuNode announces node with n devices, GPU-<node>-0 … in bus order.
func gpuNode(node, boot string, n int) step {
	a := &events.NodeAnnounced{Node: node, Boot: boot, CPU: 8, MemoryBytes: 16 * gib, DiskBytes: 100 * gib, GPU: n}
	for i := range n {
		a.Devices = append(a.Devices, events.Device{UUID: fmt.Sprintf("GPU-%s-%d", node, i), Minor: i, Bus: fmt.Sprintf("0000:%02x:00.0", i)})
	}
	return step{node, a}
}

// gpus makes the job ask for n GPUs.
func gpus(n int) opt { return func(s *events.JobSpec) { s.Request.GPU = n } }

func withdrawn(node, boot, uuid string, change int) step {
	return step{node, &events.DeviceWithdrawn{Node: node, Boot: boot, Device: uuid, Reason: "1 compute process(es) still on it (pid 42)", Change: change}}
}

func restored(node, boot, uuid string, change int) step {
	return step{node, &events.DeviceRestored{Node: node, Boot: boot, Device: uuid, Change: change}}
}

// heldGPUs are the devices each ComputeHeld of ds names, by job.
func heldGPUs(t *testing.T, ds []rent.Decision) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, d := range ds {
		h, ok := d.Event.(*events.ComputeHeld)
		if !ok {
			t.Fatalf("decided %T for %s, want holds only", d.Event, d.Job)
		}
		out[d.Job] = h.GPUs
	}
	return out
}

func TestPoolHoldsGPUsByDevice(t *testing.T) {
	t.Parallel()
	var h history
	p := newPool()
	applyAll(p, h.log(gpuNode("n1", "b1", 2), submit("a", 1, gpus(1)), submit("b", 1, gpus(1)), submit("c", 1, gpus(1)), submit("d", 1)))
	ds := p.Decide(100)
	// a and b in one pass, each its own device; c waits; d needs none.
	want := map[string][]string{"a": {"GPU-n1-0"}, "b": {"GPU-n1-1"}, "d": nil}
	if got := heldGPUs(t, ds); !reflect.DeepEqual(got, want) {
		t.Fatalf("held %v, want %v", got, want)
	}
	applyAll(p, h.stored(ds))
	if free := rent.FreeDevices(p)["n1"]; len(free) != 0 {
		t.Errorf("free after both are held: %v, want none", free)
	}
	if ds := p.Decide(100); len(ds) != 0 {
		t.Errorf("with every GPU held, Decide = %q", describe(ds))
	}
	why := p.Why("c")
	if why.State != "waiting" || !strings.Contains(why.Reason, "waiting for a GPU") || !strings.Contains(why.Reason, "n1: 0 of 2 free, 2 held") {
		t.Errorf("why c waits = %+v, want that it waits for a GPU", why)
	}
	if r := p.WhyFor("c", "alice", false).Reason; !strings.Contains(r, "waiting for a GPU") {
		t.Errorf("alice is told c waits because %q, want for a GPU", r)
	}

	// b ends: its device goes to c.
	applyAll(p, h.log(step{"b", &events.ComputeReleased{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: gib, GPU: 1, DiskBytes: 1 << 20, GPUs: []string{"GPU-n1-1"}}, Outcome: events.Succeeded, Final: true}}))
	ds = p.Decide(100)
	if got := heldGPUs(t, ds); !reflect.DeepEqual(got, map[string][]string{"c": {"GPU-n1-1"}}) {
		t.Errorf("after b ended, held %v, want c on b's device", got)
	}
}

func TestPoolReplayedFromTheLogHoldsTheSameDevicesFree(t *testing.T) {
	t.Parallel()
	var h history
	live := newPool()
	applyAll(live, h.log(gpuNode("n1", "b1", 4), gpuNode("n2", "b1", 2),
		submit("a", 1, gpus(2)), submit("b", 1, gpus(1)), submit("c", 1, gpus(3)), submit("d", 1, gpus(1))))
	for range 3 {
		applyAll(live, h.stored(live.Decide(2)))
	}
	applyAll(live, h.log(withdrawn("n2", "b1", "GPU-n2-1", 1),
		step{"a", &events.ComputeReleased{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: gib, GPU: 2, DiskBytes: 1 << 20, GPUs: []string{"GPU-n1-0", "GPU-n1-1"}}, Outcome: events.Succeeded, Final: true}}))
	replayed := newPool()
	applyAll(replayed, h.envs)
	got, want := rent.FreeDevices(replayed), rent.FreeDevices(live)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replayed pool has free %v, the live one %v", got, want)
	}
	if len(want["n1"])+len(want["n2"]) == 0 {
		t.Fatalf("the history leaves no device free: %v", want)
	}
	if a, b := describe(live.Decide(100)), describe(replayed.Decide(100)); !reflect.DeepEqual(a, b) {
		t.Errorf("the live pool decides %q, the replayed one %q", a, b)
	}
}

func TestPoolNeverPlacesOnAWithdrawnDevice(t *testing.T) {
	t.Parallel()
	var h history
	p := newPool()
	applyAll(p, h.log(gpuNode("n1", "b1", 2), withdrawn("n1", "b1", "GPU-n1-0", 1), submit("a", 1, gpus(1)), submit("b", 1, gpus(1))))
	ds := p.Decide(100)
	if got := heldGPUs(t, ds); !reflect.DeepEqual(got, map[string][]string{"a": {"GPU-n1-1"}}) {
		t.Fatalf("held %v, want a on the device not withdrawn and b waiting", got)
	}
	applyAll(p, h.stored(ds))
	if r := p.Why("b").Reason; !strings.Contains(r, "withdrawn by the node: GPU-n1-0 (1 compute process(es) still on it (pid 42))") {
		t.Errorf("why b waits: %q, want the withdrawn device named with why", r)
	}
	if r := p.WhyFor("b", "alice", false).Reason; strings.Contains(r, "pid 42") {
		t.Errorf("alice is told why another's device was withdrawn: %q", r)
	}
	// A withdrawal of an older boot changes nothing; a restoration of
	// this one gives the device back.
	applyAll(p, h.log(withdrawn("n1", "b0", "GPU-n1-1", 1)))
	applyAll(p, h.log(restored("n1", "b1", "GPU-n1-0", 2)))
	if got := heldGPUs(t, p.Decide(100)); !reflect.DeepEqual(got, map[string][]string{"b": {"GPU-n1-0"}}) {
		t.Errorf("after the restoration, held %v, want b on the restored device", got)
	}
}

func TestPoolNodeRestartedWithAGPUMissingOffersOnlyWhatItHas(t *testing.T) {
	t.Parallel()
	var h history
	p := newPool()
	applyAll(p, h.log(gpuNode("n1", "b1", 2), submit("a", 1, gpus(1))))
	ds := p.Decide(100)
	applyAll(p, h.stored(ds)) // a holds GPU-n1-0
	// The node restarts without GPU-n1-1 and withdraws it; a's hold ends
	// through its own events.
	again := gpuNode("n1", "b2", 1)
	applyAll(p, h.log(again, withdrawn("n1", "b2", "GPU-n1-1", 1), submit("b", 1, gpus(1))))
	if ds := p.Decide(100); len(ds) != 0 {
		t.Fatalf("with a's device held and the other gone, Decide = %q", describe(ds))
	}
	if r := p.Why("b").Reason; !strings.Contains(r, "0 of 1 free, 1 held, 1 withdrawn by the node: GPU-n1-1") {
		t.Errorf("why b waits: %q", r)
	}
	applyAll(p, h.log(step{"a", &events.ComputeReleased{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: gib, GPU: 1, DiskBytes: 1 << 20, GPUs: []string{"GPU-n1-0"}}, Outcome: events.Succeeded, Final: true}}))
	if got := heldGPUs(t, p.Decide(100)); !reflect.DeepEqual(got, map[string][]string{"b": {"GPU-n1-0"}}) {
		t.Errorf("held %v, want b on the device the node still has", got)
	}
}

func TestPoolHoldLostNamesTheDevices(t *testing.T) {
	t.Parallel()
	var h history
	p := newPool()
	applyAll(p, h.log(gpuNode("n1", "b1", 2), submit("a", 1, gpus(2))))
	applyAll(p, h.stored(p.Decide(100)))
	applyAll(p, h.log(step{"n1", &events.NodeExpired{Node: "n1", Boot: "b1", Reason: "lease lapsed"}}))
	ds := p.Decide(100)
	if len(ds) != 1 {
		t.Fatalf("Decide = %q, want the hold lost", describe(ds))
	}
	if hl, ok := ds[0].Event.(*events.HoldLost); !ok || !reflect.DeepEqual(hl.GPUs, []string{"GPU-n1-0", "GPU-n1-1"}) {
		t.Errorf("decided %+v, want HoldLost naming both devices", ds[0].Event)
	}
}
