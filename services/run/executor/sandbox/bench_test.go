//go:build linux

package sandbox

import (
	"context"
	"io"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
)

// BenchmarkSandboxTrue is the whole per-job cost of the sandbox: Prepare,
// Run and Release of /bin/true, its output going through pipes, as RUN
// runs jobs. Besides the wall time it reports the CPU
// time per job of this process and the jobs (cpu-µs/op), which does not
// depend on what else the machine runs.
func BenchmarkSandboxTrue(b *testing.B) {
	e := newExecutor(b, Config{})
	ctx := context.Background()
	defer reportCPU(b)()
	for i := 0; b.Loop(); i++ {
		ws, err := e.Prepare(ctx, executor.Spec{JobID: "bench", Attempt: i, Command: []string{"/bin/true"},
			CPU: 1, MemoryBytes: 64 << 20, DiskBytes: 16 << 20, Limit: time.Minute, Grace: time.Second,
			Stdout: io.Discard, Stderr: io.Discard})
		if err != nil {
			b.Fatal(err)
		}
		res, err := ws.Run(ctx)
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
	defer reportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ws, err := e.Prepare(ctx, executor.Spec{JobID: "benchp", Attempt: n.next(), Command: []string{"/bin/true"},
				CPU: 1, MemoryBytes: 64 << 20, DiskBytes: 16 << 20, Limit: time.Minute, Grace: time.Second,
				Stdout: io.Discard, Stderr: io.Discard})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ws.Run(ctx); err != nil {
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
	defer reportCPU(b)()
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForkExecTrueParallel is the parallel baseline.
func BenchmarkForkExecTrueParallel(b *testing.B) {
	defer reportCPU(b)()
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

// reportCPU resets the timer and returns a func that reports the CPU time
// (user and system) this process and its waited-for children spent per
// op since: the executor's work and the jobs', but not the kernel's
// workers'.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var self, children syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
		var d int64
		for _, r := range []syscall.Rusage{self, children} {
			d += r.Utime.Nano() + r.Stime.Nano()
		}
		return time.Duration(d)
	}
	start := cpu()
	b.ResetTimer()
	return func() {
		b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-µs/op")
	}
}
