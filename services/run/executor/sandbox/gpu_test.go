//go:build linux

package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/gpu"
	"github.com/e31net/e31/services/run/gpu/gputest"
)

// The NVIDIA driver is not loaded on the machines that test e31: a node of
// its major (195) that the job's cgroup allows opens with ENXIO (the open
// reachedKernel the kernel, which has no driver for it), one it refuses with
// EPERM (the cgroup denied it before any driver was asked).
const (
	reachedKernel = "No such device or address"
	denied        = "Operation not permitted"
)

// probeDevices is a job that lists its /dev and tries to open each NVIDIA
// node in it, printing "<node>=<error>" (or "<node>=opened").
const probeDevices = `echo "dev=$(ls /dev | tr '\n' ' ')"
for f in /dev/nvidia*; do
  [ -e "$f" ] || continue
  if (exec 3<"$f") 2>/tmp/err; then echo "$f=opened"; else echo "$f=$(cat /tmp/err)"; fi
done
echo "cuda=$CUDA_VISIBLE_DEVICES uuids=$E31_GPU_UUIDS order=$CUDA_DEVICE_ORDER nvidia=$NVIDIA_VISIBLE_DEVICES"`

// gpuSpec is a job that holds held of devs (a fake node's), told of them
// as RUN tells it.
func gpuSpec(t *testing.T, id string, devs []events.Device, held ...string) executor.Spec {
	t.Helper()
	root := t.TempDir()
	gputest.Tree(t, root, devs, gputest.FreeMajor(t))
	d, err := gpu.Discover(root)
	if err != nil {
		t.Fatal(err)
	}
	s := spec(id, sh(probeDevices))
	s.GPUs = executor.GPUsFor(d, d.Devices, held, "")
	s.Env = map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"} // as CUDA images set it
	s.GPUs.Env(s.Env)
	return s
}

func TestAGPUJobSeesItsOwnDevicesAlone(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	devs := gputest.Devices(2)
	// A node of the other GPU made in the job's /dev all the same (as if
	// it had come some other way): the cgroup refuses it.
	e.testNodes = []gpu.Node{{Name: "nvidia1", Major: gputest.Major, Minor: 1}}
	r := runJob(t, e, gpuSpec(t, "gpu-alone", devs, devs[0].UUID), nil)
	if r.res.Outcome != events.Succeeded {
		t.Fatalf("outcome %s: %s", r.res.Outcome, r.res.Reason)
	}
	got := lines(r.stdout)
	for _, name := range []string{"nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "null", "urandom", "shm"} {
		if !strings.Contains(" "+got["dev"], " "+name+" ") {
			t.Errorf("the job's /dev is %q, want %s in it", got["dev"], name)
		}
	}
	for _, node := range []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} {
		if !strings.Contains(got[node], reachedKernel) {
			t.Errorf("opening %s: %q, want %q (allowed: it reachedKernel the kernel)", node, got[node], reachedKernel)
		}
	}
	if !strings.Contains(got["/dev/nvidia1"], denied) {
		t.Errorf("opening the other GPU's node: %q, want %q (the devices cgroup refuses it)", got["/dev/nvidia1"], denied)
	}
	want := "cuda=0 uuids=" + devs[0].UUID + " order=PCI_BUS_ID nvidia="
	if got := strings.TrimSpace(r.stdout[strings.LastIndex(r.stdout, "cuda="):]); got != want {
		t.Errorf("the job's environment: %q, want %q", got, want)
	}
}

func TestAJobHoldingNoGPUSeesNoNVIDIADevice(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	s := gpuSpec(t, "gpu-none", gputest.Devices(2))
	r := runJob(t, e, s, nil)
	if r.res.Outcome != events.Succeeded {
		t.Fatalf("outcome %s: %s", r.res.Outcome, r.res.Reason)
	}
	got := lines(r.stdout)
	if strings.Contains(got["dev"], "nvidia") {
		t.Errorf("a job holding no GPU has /dev %q", got["dev"])
	}
	if !strings.Contains(r.stdout, "cuda= uuids= order= nvidia=void") {
		t.Errorf("a job holding no GPU is told %q, want NVIDIA_VISIBLE_DEVICES=void and nothing of CUDA", r.stdout)
	}
}

// TestASlotCgroupForgetsTheLastJobsDevices: a slot's cgroup serves one job
// after another (v1): the next job's rules are its own.
func TestASlotCgroupForgetsTheLastJobsDevices(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	if !e.cgroups.limitsDevices() {
		t.Skip("no devices controller")
	}
	devs := gputest.Devices(1)
	ws := prepare(t, e, gpuSpec(t, "gpu-first", devs, devs[0].UUID))
	cg, ok := ws.(*job).cg.(*cgroup1Job)
	if !ok {
		t.Skip("cgroup v2: a cgroup serves one job")
	}
	list := func() string {
		b, err := os.ReadFile(filepath.Join(cg.dirs["devices"], "devices.list"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if l := list(); !strings.Contains(l, "c 195:0 rwm") || strings.Contains(l, "a *:* rwm") {
		t.Fatalf("a GPU job's devices.list:\n%s\nwant its GPU and no 'allow all'", l)
	}
	if err := cg.reset(limits{memoryBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if l := list(); strings.Contains(l, "195:") || !strings.Contains(l, "c 1:3 rwm") {
		t.Errorf("the next job's devices.list:\n%s\nwant /dev/null and nothing of the GPU", l)
	}
}

// TestTheV2RulesRefuseEveryOtherDevice compiles the rules of a job holding
// GPU 0 into the eBPF program of cgroup v2 and, where this host has a v2
// hierarchy (the hybrid mount beside v1, or a unified one), attaches it to
// a cgroup and opens device nodes from a process in it.
func TestTheV2RulesRefuseEveryOtherDevice(t *testing.T) {
	t.Parallel()
	nodes := gpu.Driver{Major: gputest.Major, UVMMajor: 230}.Nodes(gputest.Devices(1))
	rules := deviceRules(nodes)
	if _, _, err := cgroup2.DeviceFilter(rules); err != nil {
		t.Fatalf("the rules do not compile to a device filter: %v", err)
	}
	if rules[0].Allow || rules[0].Type != "a" || *rules[0].Major != -1 || *rules[0].Minor != -1 {
		t.Errorf("the first rule is %+v, want one that refuses everything", rules[0])
	}
	var allowed []string
	for _, r := range rules[1:] {
		allowed = append(allowed, r.Type+" "+itoa(*r.Major)+":"+itoa(*r.Minor)+" "+r.Access)
	}
	if want := "c 1:3 rwm,c 1:5 rwm,c 1:7 rwm,c 1:8 rwm,c 1:9 rwm,c 5:0 rwm,c 195:0 rwm,c 195:255 rwm,c 230:0 rwm,c 230:1 rwm"; strings.Join(allowed, ",") != want {
		t.Errorf("the rules allow %s, want %s", strings.Join(allowed, ","), want)
	}

	if os.Geteuid() != 0 {
		t.Skip("attaching the filter needs root")
	}
	mount := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(filepath.Join(mount, "cgroup.procs")); err != nil {
		mount = "/sys/fs/cgroup"
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(mount, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Skip("no cgroup v2 hierarchy on this host")
	}
	group := "/e31-devices-test-" + itoa(int64(os.Getpid()))
	m, err := cgroup2.NewManager(mount, group, &cgroup2.Resources{Devices: rules})
	if err != nil {
		t.Skipf("cannot make a v2 cgroup with a device filter here: %v", err)
	}
	t.Cleanup(func() { _ = m.Delete() })
	dir := t.TempDir()
	for _, n := range []gpu.Node{{Name: "mine", Major: gputest.Major, Minor: 0}, {Name: "other", Major: gputest.Major, Minor: 1}} {
		if err := unix.Mknod(filepath.Join(dir, n.Name), unix.S_IFCHR|0o666, int(unix.Mkdev(n.Major, n.Minor))); err != nil {
			t.Fatal(err)
		}
	}
	cgfd, err := unix.Open(filepath.Join(mount, group), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cgfd)
	open := func(path string) string {
		cmd := exec.Command("/bin/sh", "-c", `exec 3<"$1"`, "sh", path)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgfd}
		out, err := cmd.CombinedOutput()
		if err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("start a process in the cgroup: %v", err)
			}
		}
		return string(out)
	}
	if got := open("/dev/null"); got != "" {
		t.Errorf("opening /dev/null in the cgroup: %q, want it opened", got)
	}
	if got := open(filepath.Join(dir, "mine")); !strings.Contains(got, reachedKernel) {
		t.Errorf("opening the held GPU's node in the cgroup: %q, want %q", got, reachedKernel)
	}
	if got := open(filepath.Join(dir, "other")); !strings.Contains(got, denied) {
		t.Errorf("opening another GPU's node in the cgroup: %q, want %q", got, denied)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestTheJobsProcShowsTheDriverOfItsOwnDevicesAlone mounts, in a mount
// namespace of its own, what a job's /proc/driver/nvidia becomes: a copy
// of the driver's view with two devices, of which the job holds one.
// (No driver is loaded on the machines that test e31: this is the part
// of the real path that can run here.)
func TestTheJobsProcShowsTheDriverOfItsOwnDevicesAlone(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("mounts need root")
	}
	root := t.TempDir()
	devs := gputest.Devices(2)
	gputest.Tree(t, root, devs, 0)
	driver := filepath.Join(root, "proc/driver/nvidia")
	if err := os.WriteFile(filepath.Join(driver, "params"), []byte("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	params := filepath.Join(t.TempDir(), "params")
	if ok, err := gpu.WriteParams(root, params); !ok || err != nil {
		t.Fatalf("WriteParams: %v, %v", ok, err)
	}
	type seen struct {
		gpus        []string
		information string
		params      string
		err         error
	}
	done := make(chan seen, 1)
	go onOwnThread(func() {
		var s seen
		defer func() { done <- s }()
		if s.err = unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); s.err != nil {
			return
		}
		if s.err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); s.err != nil {
			return
		}
		var d driverClones
		d.params = -1
		fd, err := unix.OpenTree(unix.AT_FDCWD, filepath.Join(driver, "gpus", devs[1].Bus), unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if s.err = err; err != nil {
			return
		}
		d.buses, d.gpus = []string{devs[1].Bus}, []int{fd}
		if d.params, s.err = (bind{src: params, readOnly: true}).clone(); s.err != nil {
			return
		}
		defer d.close()
		if s.err = hideDriverAt(driver, d); s.err != nil {
			return
		}
		ents, _ := os.ReadDir(filepath.Join(driver, "gpus"))
		for _, e := range ents {
			s.gpus = append(s.gpus, e.Name())
		}
		b, _ := os.ReadFile(filepath.Join(driver, "gpus", devs[1].Bus, "information"))
		s.information = string(b)
		b, _ = os.ReadFile(filepath.Join(driver, "params"))
		s.params = string(b)
	})
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	if len(s.gpus) != 1 || s.gpus[0] != devs[1].Bus || !strings.Contains(s.information, devs[1].UUID) {
		t.Errorf("the job's driver lists %v (%q), want %s alone", s.gpus, s.information, devs[1].Bus)
	}
	if !strings.Contains(s.params, "ModifyDeviceFiles: 0") || strings.Contains(s.params, "ModifyDeviceFiles: 1") || !strings.Contains(s.params, "DeviceFileUID: 0") {
		t.Errorf("the job's params:\n%s\nwant ModifyDeviceFiles: 0 and the rest as the driver's", s.params)
	}
	// The node's own view is as it was.
	if ents, _ := os.ReadDir(filepath.Join(driver, "gpus")); len(ents) != 2 {
		t.Errorf("the node's driver view lists %d devices after, want 2", len(ents))
	}
}
