package container

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
)

func TestTheEngineIsAskedForExactlyTheHeldDevices(t *testing.T) {
	t.Parallel()
	held := executor.GPUs{Held: []events.Device{
		{UUID: "GPU-bbbb", Minor: 1, Bus: "0000:1c:00.0"},
		{UUID: "GPU-cccc", Minor: 2, Bus: "0000:1d:00.0"},
	}}
	dir := t.TempDir()
	// As nvidia-ctk writes them: by index, and by UUID for one device.
	spec := `cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0}]
- name: "1"
  containerEdits:
    deviceNodes: [{path: /dev/nvidia1}]
- name: "2"
  containerEdits:
    deviceNodes: [{path: /dev/nvidia2}]
- name: GPU-cccc
  containerEdits:
    deviceNodes: [{path: /dev/nvidia2}]
- name: all
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0}, {path: /dev/nvidia1}, {path: /dev/nvidia2}]
`
	if err := os.WriteFile(filepath.Join(dir, "nvidia.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.json"), []byte(`{"cdiVersion":"0.5.0","kind":"vendor.com/fpga","devices":[{"name":"GPU-bbbb"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		names map[string]string
		want  []container.DeviceRequest
	}{
		{"CDI: by UUID where a device is named so, else by its node", cdiNames([]string{dir, filepath.Join(dir, "missing")}),
			[]container.DeviceRequest{{Driver: "cdi", DeviceIDs: []string{"nvidia.com/gpu=1", "nvidia.com/gpu=GPU-cccc"}}}},
		{"no CDI: the nvidia driver by UUID", nil,
			[]container.DeviceRequest{{Driver: "nvidia", DeviceIDs: []string{"GPU-bbbb", "GPU-cccc"}, Capabilities: [][]string{{"gpu"}}}}},
		{"CDI naming only some: the nvidia driver", map[string]string{"GPU-bbbb": "nvidia.com/gpu=GPU-bbbb"},
			[]container.DeviceRequest{{Driver: "nvidia", DeviceIDs: []string{"GPU-bbbb", "GPU-cccc"}, Capabilities: [][]string{{"gpu"}}}}},
	} {
		if got := deviceRequests(held, c.names); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: asked for %+v, want %+v", c.name, got, c.want)
		}
	}
	if got := deviceRequests(executor.GPUs{}, map[string]string{}); got != nil {
		t.Errorf("a job holding no GPU asks for %+v", got)
	}
	if v := visibleDevices(held); v != "GPU-bbbb,GPU-cccc" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES of a GPU job = %q", v)
	}
	if v := visibleDevices(executor.GPUs{}); v != "void" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES of a job holding none = %q, want void", v)
	}
}
