// Package gputest makes what a node's NVIDIA driver shows, under a
// directory, for tests on machines without a GPU: the information files of
// /proc/driver/nvidia/gpus and the majors of /proc/devices (gpu.Discover
// reads them under --gpu-root).
package gputest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// Major is the major the NVIDIA driver's device nodes have by convention.
// With no driver loaded, opening a node of it that the devices cgroup
// allows fails with ENXIO (the open reached the kernel); one it denies,
// with EPERM.
const Major = 195

// Devices are n fake devices, minors 0…n-1, on buses 0000:1b:00.0,
// 0000:1c:00.0, ….
func Devices(n int) []events.Device {
	out := make([]events.Device, n)
	for i := range out {
		out[i] = events.Device{
			UUID:  fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", 0xe31e31+i, i),
			Minor: i,
			Model: "NVIDIA Fake 80GB",
			Bus:   fmt.Sprintf("0000:%02x:00.0", 0x1b+i),
		}
	}
	return out
}

// Tree writes, under root, the driver's view of devs and a /proc/devices
// that gives the driver Major and the uvm module uvm (0: not loaded).
func Tree(t testing.TB, root string, devs []events.Device, uvm uint32) {
	t.Helper()
	for _, d := range devs {
		Add(t, root, d)
	}
	var b strings.Builder
	b.WriteString("Character devices:\n  1 mem\n  5 /dev/tty\n")
	fmt.Fprintf(&b, "%3d nvidia-frontend\n", Major)
	if uvm != 0 {
		fmt.Fprintf(&b, "%3d nvidia-uvm\n", uvm)
	}
	b.WriteString("\nBlock devices:\n  7 loop\n")
	write(t, filepath.Join(root, "proc/devices"), b.String())
}

// Add writes the information file of one device under root, as the
// driver does when it finds it.
func Add(t testing.TB, root string, d events.Device) {
	t.Helper()
	write(t, filepath.Join(root, "proc/driver/nvidia/gpus", d.Bus, "information"), fmt.Sprintf(
		"Model: \t\t %s\nIRQ:   \t\t 42\nGPU UUID: \t %s\nVideo BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n",
		d.Model, d.UUID, d.Bus, d.Minor))
}

// Remove takes a device out of the driver's view under root, as when it
// falls off the bus.
func Remove(t testing.TB, root string, d events.Device) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(root, "proc/driver/nvidia/gpus", d.Bus)); err != nil {
		t.Fatal(err)
	}
}

// FreeMajor is a character major the running kernel has not registered,
// for a fake uvm module: a node of it opens with ENXIO.
func FreeMajor(t testing.TB) uint32 {
	t.Helper()
	b, err := os.ReadFile("/proc/devices")
	if err != nil {
		t.Skipf("no /proc/devices: %v", err)
	}
	used := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			used[f[0]] = true
		}
	}
	for m := 240; m > 200; m-- { // the range Linux keeps for local use
		if !used[fmt.Sprint(m)] {
			return uint32(m)
		}
	}
	t.Skip("no free character major for a fake uvm module")
	return 0
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
