package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/run/gpu/gputest"
)

// gpuProbe is a job's script that writes to /out/seen.txt what it sees of
// the node's GPUs: its /dev, what opening each NVIDIA node there does, and
// what it is told; then it stays a while, so that jobs overlap.
const gpuProbe = `out=$E31_OUTPUT/seen.txt
echo "dev=$(ls /dev | tr '\n' ' ')" > $out
for f in /dev/nvidia*; do
  [ -e "$f" ] || continue
  if (exec 3<"$f") 2>/tmp/err; then echo "$f=opened" >> $out; else echo "$f=$(cat /tmp/err)" >> $out; fi
done
echo "cuda=$CUDA_VISIBLE_DEVICES" >> $out
echo "uuids=$E31_GPU_UUIDS" >> $out
echo "nvidia=$NVIDIA_VISIBLE_DEVICES" >> $out
sleep "${STAY:-0}"
`

func gpuJob(t *testing.T, gpus int, stay string) string {
	t.Helper()
	return writeJob(t, `
work: {command: ["/bin/sh", "/data/probe/probe.sh"], env: {STAY: "`+stay+`", NVIDIA_VISIBLE_DEVICES: all}}
data: [{name: probe, path: ./probe}]
request: {cpu: 0.25, memory: 64MiB, gpu: `+strconv.Itoa(gpus)+`, limit: 2m}
output: [seen.txt]
`, map[string]string{"probe/probe.sh": gpuProbe})
}

// seen is what a job wrote to seen.txt, key by key.
func (ts *testSystem) seen(id string) map[string]string {
	ts.t.Helper()
	dir := ts.t.TempDir()
	if out, errOut, code := ts.cli("output", id, "-o", dir); code != 0 {
		ts.t.Fatalf("e31 output %s: exit %d: %s %s", id, code, out, errOut)
	}
	b, err := os.ReadFile(filepath.Join(dir, "seen.txt"))
	if err != nil {
		ts.t.Fatal(err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// TestGPUJobsGetTheirDevicesAlone runs e31 dev on a node with two GPUs (a
// fake driver tree, and device nodes of major 195 with no driver loaded:
// an open the devices cgroup allows fails with ENXIO, one it refuses with
// EPERM). Two gpu:1 jobs at once each see one device node of their own,
// reach it, and are told CUDA_VISIBLE_DEVICES=0 and their own UUID; their
// records name different devices. A third waits, and e31 status says it
// waits for a GPU. A gpu:0 job sees no NVIDIA device. The audit passes.
func TestGPUJobsGetTheirDevicesAlone(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: the sandbox needs root; CI runs this as root")
	}
	root := t.TempDir()
	devs := gputest.Devices(2)
	gputest.Tree(t, root, devs, gputest.FreeMajor(t))
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 1, node: run.Config{GPURoot: root}})

	a, b := ts.submit(gpuJob(t, 1, "6")), ts.submit(gpuJob(t, 1, "6"))
	none := ts.submit(gpuJob(t, 0, "0"))
	ts.waitState(a, hold.StateRunning)
	ts.waitState(b, hold.StateRunning)
	third := ts.submit(gpuJob(t, 1, "0"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _, _ := ts.cli("status", third)
		if strings.Contains(out, "waiting for a GPU") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("e31 status of a third gpu:1 job while two hold both GPUs:\n%s\nwant that it waits for a GPU", out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	recs := map[string]*hold.HoldRecord{}
	for _, id := range []string{a, b, none, third} {
		rec, code := ts.wait(id)
		if code != 0 || rec.Outcome != events.Succeeded {
			t.Fatalf("job %s: %s (%s)", id, rec.Outcome, rec.Reason)
		}
		recs[id] = rec
	}
	ra, rb := recs[a].Attempts[0], recs[b].Attempts[0]
	if len(ra.Held.GPUs) != 1 || len(rb.Held.GPUs) != 1 || ra.Held.GPUs[0] == rb.Held.GPUs[0] {
		t.Fatalf("the records name %v and %v, want one device each, not the same", ra.Held.GPUs, rb.Held.GPUs)
	}
	if !ra.StartedAt.Before(*rb.StoppedAt) || !rb.StartedAt.Before(*ra.StoppedAt) {
		t.Errorf("the two jobs did not run at once: %v–%v and %v–%v", ra.StartedAt, ra.StoppedAt, rb.StartedAt, rb.StoppedAt)
	}
	for _, id := range []string{a, b, third} {
		rec := recs[id].Attempts[0]
		uuid := rec.Held.GPUs[0]
		if rec.GPUSecondsByDevice[uuid] != rec.HeldSeconds {
			t.Errorf("job %s: gpu seconds by device %v, want %s for its %g held seconds", id, rec.GPUSecondsByDevice, uuid, rec.HeldSeconds)
		}
		var minor string
		for _, d := range devs {
			if d.UUID == uuid {
				minor = strconv.Itoa(d.Minor)
			}
		}
		seen := ts.seen(id)
		var nodes []string
		for _, n := range strings.Fields(seen["dev"]) {
			if strings.HasPrefix(n, "nvidia") && n != "nvidiactl" && !strings.HasPrefix(n, "nvidia-uvm") {
				nodes = append(nodes, n)
			}
		}
		if len(nodes) != 1 || nodes[0] != "nvidia"+minor {
			t.Errorf("job %s holding %s sees GPU nodes %v, want nvidia%s alone", id, uuid, nodes, minor)
		}
		if got := seen["/dev/nvidia"+minor]; !strings.Contains(got, "No such device or address") {
			t.Errorf("job %s opening its device: %q, want ENXIO (it reached the kernel)", id, got)
		}
		if seen["cuda"] != "0" || seen["uuids"] != uuid || seen["nvidia"] != "" {
			t.Errorf("job %s was told cuda=%q uuids=%q nvidia=%q, want 0, %s and nothing", id, seen["cuda"], seen["uuids"], seen["nvidia"], uuid)
		}
	}
	seen := ts.seen(none)
	if strings.Contains(seen["dev"], "nvidia") || seen["nvidia"] != "void" || seen["cuda"] != "" {
		t.Errorf("a gpu:0 job saw /dev %q and was told nvidia=%q cuda=%q; want no NVIDIA device, void and nothing", seen["dev"], seen["nvidia"], seen["cuda"])
	}
	if len(recs[none].Attempts[0].Held.GPUs) != 0 {
		t.Errorf("a gpu:0 job's record names devices: %v", recs[none].Attempts[0].Held.GPUs)
	}
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 {
		t.Errorf("audit after GPU jobs:\n%s", out)
	}
}
