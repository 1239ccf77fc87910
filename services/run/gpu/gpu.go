// Package gpu finds a node's NVIDIA GPUs the way the driver lists them,
// in pure Go: every /proc/driver/nvidia/gpus/<bus>/information (Model, GPU
// UUID, Bus Location, Device Minor) and the driver's character-device
// majors in /proc/devices, all read under a root directory (--gpu-root,
// "/" on a real node; a test points it at a fake tree). The node agent is
// a static binary (CGO_ENABLED=0), so discovery needs no NVML; what only
// NVML can tell (memory, utilisation, compute processes left on a device)
// comes through a Probe, which a node built without NVML does not have:
// it then records no utilisation rather than guessing (see OpenProbe).
//
// A job holding devices is given, in the sandbox, exactly their nodes
// (/dev/nvidia<minor>) and the driver's shared ones (nvidiactl,
// nvidia-uvm, nvidia-uvm-tools): Nodes says which, with their numbers.
package gpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/e31net/e31/pkg/events"
)

// Driver is what a node's NVIDIA driver shows: its devices, in bus order,
// and the majors of its device nodes.
type Driver struct {
	// Root is the directory everything was read under.
	Root string
	// Devices are the GPUs, ordered by bus location: the order
	// CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them in.
	Devices []events.Device
	// Major is the major of /dev/nvidia<minor> and /dev/nvidiactl
	// ("nvidia-frontend" or "nvidia" in /proc/devices; 195 by
	// convention); 0 where the driver is not loaded.
	Major uint32
	// UVMMajor is the major of /dev/nvidia-uvm and nvidia-uvm-tools; 0
	// where the nvidia-uvm module is not loaded (CUDA then fails in a
	// job: it needs unified memory).
	UVMMajor uint32
}

// The minors of the driver's shared nodes.
const (
	ctlMinor      = 255 // nvidiactl, on Major
	uvmMinor      = 0   // nvidia-uvm, on UVMMajor
	uvmToolsMinor = 1   // nvidia-uvm-tools, on UVMMajor
)

// Node is one character-device node a job holding GPUs is given: its name
// under /dev and its numbers.
type Node struct {
	Name         string
	Major, Minor uint32
}

// Nodes are the device nodes a job holding devs is given: one
// nvidia<minor> per device, then nvidiactl, nvidia-uvm and
// nvidia-uvm-tools (the last two only where the uvm module is loaded).
// None for a job holding no device.
func (d Driver) Nodes(devs []events.Device) []Node {
	if len(devs) == 0 || d.Major == 0 {
		return nil
	}
	out := make([]Node, 0, len(devs)+3)
	for _, dev := range devs {
		out = append(out, Node{Name: "nvidia" + strconv.Itoa(dev.Minor), Major: d.Major, Minor: uint32(dev.Minor)})
	}
	out = append(out, Node{Name: "nvidiactl", Major: d.Major, Minor: ctlMinor})
	if d.UVMMajor != 0 {
		out = append(out, Node{Name: "nvidia-uvm", Major: d.UVMMajor, Minor: uvmMinor},
			Node{Name: "nvidia-uvm-tools", Major: d.UVMMajor, Minor: uvmToolsMinor})
	}
	return out
}

// Find returns the device of uuid, if the driver lists it.
func (d Driver) Find(uuid string) (events.Device, bool) {
	for _, dev := range d.Devices {
		if dev.UUID == uuid {
			return dev, true
		}
	}
	return events.Device{}, false
}

// gpusDir is where the driver lists its devices, one directory per bus
// location.
const gpusDir = "proc/driver/nvidia/gpus"

// Discover reads the driver's devices and majors under root. A root
// without the driver (no /proc/driver/nvidia) is a node without GPUs, not
// an error; a device whose information cannot be read or makes no sense is
// an error, since the operator would otherwise lose it without a word.
func Discover(root string) (Driver, error) {
	if root == "" {
		root = "/"
	}
	d := Driver{Root: root}
	ents, err := os.ReadDir(filepath.Join(root, gpusDir))
	if errors.Is(err, os.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return d, fmt.Errorf("gpu: list devices: %w", err)
	}
	for _, ent := range ents {
		dev, err := readInformation(root, ent.Name())
		if err != nil {
			return d, err
		}
		d.Devices = append(d.Devices, dev)
	}
	slices.SortFunc(d.Devices, func(a, b events.Device) int { return strings.Compare(a.Bus, b.Bus) })
	for i := 1; i < len(d.Devices); i++ {
		if d.Devices[i].UUID == d.Devices[i-1].UUID {
			return d, fmt.Errorf("gpu: two devices have UUID %s", d.Devices[i].UUID)
		}
	}
	if d.Major, d.UVMMajor, err = readMajors(root); err != nil {
		return d, err
	}
	if len(d.Devices) > 0 && d.Major == 0 {
		return d, fmt.Errorf("gpu: %s lists devices but %s has no nvidia major", filepath.Join(root, gpusDir), filepath.Join(root, "proc/devices"))
	}
	return d, nil
}

// readInformation reads one device's information file:
//
//	Model:           NVIDIA H100 80GB HBM3
//	GPU UUID:        GPU-5f1c3a9e-2b7d-4e08-9c61-3d2a7b8e4f10
//	Bus Location:    0000:1b:00.0
//	Device Minor:    0
func readInformation(root, bus string) (events.Device, error) {
	path := filepath.Join(root, gpusDir, bus, "information")
	b, err := os.ReadFile(path)
	if err != nil {
		return events.Device{}, fmt.Errorf("gpu: read %s: %w", path, err)
	}
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	dev := events.Device{UUID: kv["GPU UUID"], Model: kv["Model"], Bus: kv["Bus Location"]}
	if dev.Bus == "" {
		dev.Bus = bus
	}
	minor, err := strconv.Atoi(kv["Device Minor"])
	if err != nil || minor < 0 || minor >= ctlMinor-1 {
		return events.Device{}, fmt.Errorf("gpu: %s: device minor %q is not a number below %d", path, kv["Device Minor"], ctlMinor-1)
	}
	dev.Minor = minor
	if !events.ValidID(dev.UUID) {
		// A device that fell off the bus reads "GPU UUID: ??…": it cannot
		// be held by name, so it is not offered.
		return events.Device{}, fmt.Errorf("gpu: %s: UUID %q is not one e31 can name (letters, digits, '-', '_')", path, dev.UUID)
	}
	return dev, nil
}

// readMajors reads the majors of the driver's character devices from
// /proc/devices under root.
func readMajors(root string) (nvidia, uvm uint32, err error) {
	path := filepath.Join(root, "proc/devices")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("gpu: read %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	char := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			char = true
			continue
		case strings.HasSuffix(line, "devices:"):
			char = false
			continue
		}
		f := strings.Fields(line)
		if !char || len(f) != 2 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil {
			continue
		}
		switch f[1] {
		case "nvidia-frontend", "nvidia":
			nvidia = uint32(n)
		case "nvidia-uvm":
			uvm = uint32(n)
		}
	}
	return nvidia, uvm, nil
}

// Choice is what --gpus says: every device the driver lists ("auto"),
// none ("none"), or those named by UUID ("GPU-…,GPU-…").
type Choice struct {
	None  bool
	UUIDs []string // nil: auto
}

// ParseChoice reads a --gpus value.
func ParseChoice(s string) (Choice, error) {
	switch strings.TrimSpace(s) {
	case "", "auto":
		return Choice{}, nil
	case "none":
		return Choice{None: true}, nil
	}
	var c Choice
	for _, u := range strings.Split(s, ",") {
		u = strings.TrimSpace(u)
		if !events.ValidID(u) {
			return Choice{}, fmt.Errorf("gpu: --gpus %q: %q is not a device UUID", s, u)
		}
		if !slices.Contains(c.UUIDs, u) {
			c.UUIDs = append(c.UUIDs, u)
		}
	}
	return c, nil
}

// String is the choice as --gpus takes it.
func (c Choice) String() string {
	switch {
	case c.None:
		return "none"
	case c.UUIDs == nil:
		return "auto"
	}
	return strings.Join(c.UUIDs, ",")
}

// Choose applies c to what the driver lists: the devices the node offers,
// and the UUIDs c names that the driver does not list (a device that fell
// off the bus, or a mistyped UUID), which the node withdraws.
func Choose(d Driver, c Choice) (offered []events.Device, missing []string) {
	switch {
	case c.None:
		return nil, nil
	case c.UUIDs == nil:
		return slices.Clone(d.Devices), nil
	}
	for _, dev := range d.Devices {
		if slices.Contains(c.UUIDs, dev.UUID) {
			offered = append(offered, dev)
		}
	}
	for _, u := range c.UUIDs {
		if _, ok := d.Find(u); !ok {
			missing = append(missing, u)
		}
	}
	return offered, missing
}

// Listed reports why the driver under root no longer lists dev as it did
// ("" when it does): its information is gone or names another device.
// It is the health check a node without NVML can make.
func Listed(root string, dev events.Device) string {
	got, err := readInformation(root, dev.Bus)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("the driver no longer lists it (no %s)", filepath.Join(gpusDir, dev.Bus))
	case err != nil:
		return fmt.Sprintf("the driver's information about it cannot be read: %v", err)
	case got.UUID != dev.UUID:
		return fmt.Sprintf("the driver lists %s at its bus location %s now", got.UUID, dev.Bus)
	}
	return ""
}

// WriteParams writes to dst the driver's params under root
// (proc/driver/nvidia/params) with ModifyDeviceFiles set to 0, and
// reports whether the driver has params at all. A job whose
// /proc/driver/nvidia/params says ModifyDeviceFiles: 0 never asks the
// driver (through nvidia-modprobe) to make the device nodes of the GPUs
// it was not given.
func WriteParams(root, dst string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(root, "proc/driver/nvidia/params"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("gpu: read the driver's params: %w", err)
	}
	var out []string
	found := false
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if k, _, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "ModifyDeviceFiles" {
			line, found = "ModifyDeviceFiles: 0", true
		}
		out = append(out, line)
	}
	if !found {
		out = append(out, "ModifyDeviceFiles: 0")
	}
	if err := os.WriteFile(dst, []byte(strings.Join(out, "\n")+"\n"), 0o444); err != nil {
		return false, fmt.Errorf("gpu: write params: %w", err)
	}
	return true, nil
}
