package gpu_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/gpu"
	"github.com/e31net/e31/services/run/gpu/gputest"
)

func TestDiscoverReadsTheDriversDevicesInBusOrder(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	devs := gputest.Devices(3)
	// Written out of order: the driver's directory order is not the bus's.
	gputest.Tree(t, root, []events.Device{devs[2], devs[0], devs[1]}, 234)
	d, err := gpu.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Devices, devs) {
		t.Errorf("devices = %+v\nwant %+v", d.Devices, devs)
	}
	if d.Major != gputest.Major || d.UVMMajor != 234 {
		t.Errorf("majors = %d, %d; want %d, 234", d.Major, d.UVMMajor, gputest.Major)
	}
	nodes := d.Nodes([]events.Device{devs[2]})
	want := []gpu.Node{{"nvidia2", 195, 2}, {"nvidiactl", 195, 255}, {"nvidia-uvm", 234, 0}, {"nvidia-uvm-tools", 234, 1}}
	if !reflect.DeepEqual(nodes, want) {
		t.Errorf("nodes of device 2 = %+v, want %+v", nodes, want)
	}
	if n := d.Nodes(nil); n != nil {
		t.Errorf("nodes of no device = %+v, want none", n)
	}
}

func TestDiscoverWithoutTheDriverFindsNone(t *testing.T) {
	t.Parallel()
	d, err := gpu.Discover(t.TempDir())
	if err != nil || len(d.Devices) != 0 || d.Major != 0 {
		t.Fatalf("Discover of an empty root = %+v, %v; want nothing", d, err)
	}
}

func TestDiscoverRefusesADeviceItCannotName(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dev := gputest.Devices(1)[0]
	dev.UUID = "??"
	gputest.Tree(t, root, []events.Device{dev}, 0)
	if _, err := gpu.Discover(root); err == nil || !strings.Contains(err.Error(), "UUID") {
		t.Fatalf("Discover of a device whose UUID reads ?? = %v, want an error naming the UUID", err)
	}
}

func TestChoice(t *testing.T) {
	t.Parallel()
	devs := gputest.Devices(2)
	d := gpu.Driver{Devices: devs, Major: 195}
	for _, c := range []struct {
		flag    string
		offered []events.Device
		missing []string
	}{
		{"auto", devs, nil},
		{"", devs, nil},
		{"none", nil, nil},
		{devs[1].UUID, devs[1:], nil},
		{devs[1].UUID + ",GPU-gone", devs[1:], []string{"GPU-gone"}},
	} {
		ch, err := gpu.ParseChoice(c.flag)
		if err != nil {
			t.Fatalf("--gpus %q: %v", c.flag, err)
		}
		offered, missing := gpu.Choose(d, ch)
		if !reflect.DeepEqual(offered, c.offered) || !reflect.DeepEqual(missing, c.missing) {
			t.Errorf("--gpus %q offers %+v and misses %q; want %+v and %q", c.flag, offered, missing, c.offered, c.missing)
		}
	}
	if _, err := gpu.ParseChoice("GPU-a,not a uuid"); err == nil {
		t.Error("--gpus with a malformed UUID was accepted")
	}
}

func TestListedSeesADeviceFallOffTheBus(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	devs := gputest.Devices(2)
	gputest.Tree(t, root, devs, 0)
	if why := gpu.Health(root, nil, devs[0]); why != "" {
		t.Fatalf("a listed device is unhealthy: %s", why)
	}
	gputest.Remove(t, root, devs[0])
	if why := gpu.Health(root, nil, devs[0]); !strings.Contains(why, "no longer lists") {
		t.Errorf("health of a device gone = %q, want that the driver no longer lists it", why)
	}
	if why := gpu.Health(root, nil, devs[1]); why != "" {
		t.Errorf("the other device is unhealthy: %s", why)
	}
}

// probe is a Probe answering from fixed figures.
type probe struct {
	procs map[string][]int
	util  float64
	used  int64
}

func (p probe) ComputeProcesses(u string) ([]int, error) { return p.procs[u], nil }
func (p probe) Sample(u string) (float64, int64, error) {
	if u == "GPU-broken" {
		return 0, 0, errors.New("lost")
	}
	return p.util, p.used, nil
}
func (p probe) MemoryBytes(string) (int64, error) { return 80 << 30, nil }
func (p probe) Close() error                      { return nil }

func TestHealthSeesComputeProcessesLeft(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dev := gputest.Devices(1)[0]
	gputest.Tree(t, root, []events.Device{dev}, 0)
	why := gpu.Health(root, probe{procs: map[string][]int{dev.UUID: {42, 7}}}, dev)
	if why != "2 compute process(es) still on it (pid 7, 42)" {
		t.Errorf("health = %q", why)
	}
}

func TestMeterRecordsWhatNVMLSaysAndNothingWithoutIt(t *testing.T) {
	t.Parallel()
	if got := gpu.StartMeter(nil, []string{"GPU-a"}, time.Millisecond).Stop(); got != nil {
		t.Errorf("a meter without NVML measured %+v, want nothing", got)
	}
	m := gpu.StartMeter(probe{util: 50, used: 1 << 30}, []string{"GPU-a", "GPU-broken"}, time.Millisecond)
	got := m.Stop()
	if len(got) != 1 || got[0].UUID != "GPU-a" || got[0].UtilizationPercent != 50 || got[0].MemoryPeakBytes != 1<<30 || got[0].Samples < 1 {
		t.Errorf("meter = %+v, want GPU-a at 50%% and 1 GiB, and nothing for the device that never answered", got)
	}
}
