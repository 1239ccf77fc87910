//go:build linux

package sandbox

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"os/exec"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
)

// BenchmarkSandboxTrue is the whole per-job cost of the sandbox: Prepare,
// Run and Release of /bin/true.
func BenchmarkSandboxTrue(b *testing.B) {
	e := newExecutor(b, Config{})
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		ws, err := e.Prepare(ctx, executor.Spec{JobID: "bench", Attempt: i, Command: []string{"/bin/true"},
			CPU: 1, MemoryBytes: 64 << 20, DiskBytes: 16 << 20, Limit: time.Minute, Grace: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		res, err := e.Run(ctx, ws)
		if err != nil {
			b.Fatal(err)
		}
		if res.Outcome != events.Succeeded {
			b.Fatalf("outcome %s: %s", res.Outcome, res.Reason)
		}
		if err := ws.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSandboxTrueParallel is BenchmarkSandboxTrue with as many jobs at
// once as GOMAXPROCS: the node's throughput rather than one job's latency.
func BenchmarkSandboxTrueParallel(b *testing.B) {
	e := newExecutor(b, Config{})
	ctx := context.Background()
	var n atomicCounter
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ws, err := e.Prepare(ctx, executor.Spec{JobID: "benchp", Attempt: n.next(), Command: []string{"/bin/true"},
				CPU: 1, MemoryBytes: 64 << 20, DiskBytes: 16 << 20, Limit: time.Minute, Grace: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := e.Run(ctx, ws); err != nil {
				b.Fatal(err)
			}
			if err := ws.Release(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkForkExecTrue is the baseline: a plain child process, as the
// process executor starts it.
func BenchmarkForkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForkExecTrueParallel is the parallel baseline.
func BenchmarkForkExecTrueParallel(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSandboxPrepareRelease is the part of BenchmarkSandboxTrue spent
// on the workspace and the cgroup, without starting anything.
func BenchmarkSandboxPrepareRelease(b *testing.B) {
	e := newExecutor(b, Config{})
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		ws, err := e.Prepare(ctx, executor.Spec{JobID: "benchpr", Attempt: i, Command: []string{"/bin/true"},
			CPU: 1, MemoryBytes: 64 << 20, DiskBytes: 16 << 20, Limit: time.Minute, Grace: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if err := ws.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

func sysBusy() (busy, total float64) {
	b, _ := os.ReadFile("/proc/stat")
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:]
	for i, x := range f {
		v, _ := strconv.ParseFloat(x, 64)
		total += v
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy / 100, total / 100
}

func zz(t *testing.T, f func(*testing.B)) {
	var r0, r1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	b0, t0 := sysBusy()
	b := testing.Benchmark(f)
	b1, t1 := sysBusy()
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	var c0, c1 syscall.Rusage
	_ = c0
	_ = c1
	n := float64(b.N)
	self := float64(r1.Utime.Nano()-r0.Utime.Nano()+r1.Stime.Nano()-r0.Stime.Nano()) / 1e9
	t.Logf("%s  self-cpu/op %.0fµs  sys-busy/op %.0fµs (sys idle frac %.2f)", b.String(), self/n*1e6, (b1-b0)/n*1e6, 1-(b1-b0)/(t1-t0))
	t.Log("\n" + PhaseReport())
}

func TestZZPhase(t *testing.T)    { zz(t, BenchmarkSandboxTrue) }
func TestZZPhasePar(t *testing.T) { zz(t, BenchmarkSandboxTrueParallel) }
func TestZZFork(t *testing.T)     { zz(t, BenchmarkForkExecTrueParallel) }
