//go:build linux

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
)

// The jobs' writable space on the node's disk (see workspace.Disk): what a
// job writes counts against its disk bound, not its memory, and one job's
// bound is its own.

// TestWriteIsNotMemory: a job with 128 MiB of memory and 1 GiB of disk
// writes 300 MB into /out and succeeds; in a tmpfs it would have been killed
// as out of memory. Its output is there for RUN to collect.
func TestWriteIsNotMemory(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	s := spec("big-write", sh(`dd if=/dev/zero of=/out/big bs=1M count=300 2>&1`))
	s.MemoryBytes, s.DiskBytes, s.Limit = 128<<20, 1<<30, time.Minute
	ws := prepare(t, e, s)
	r := finish(t, context.Background(), e, ws)
	if r.res.Outcome != events.Succeeded {
		t.Fatalf("outcome %s (%s), want succeeded", r.res.Outcome, r.res.Reason)
	}
	fi, err := os.Stat(filepath.Join(ws.Dirs().OutDir, "big"))
	if err != nil || fi.Size() != 300<<20 {
		t.Errorf("output: %v, %v; want 300 MiB", fi, err)
	}
	if r.res.Usage.MaxRSSBytes > 128<<20 {
		t.Errorf("peak memory %d past the 128 MiB limit", r.res.Usage.MaxRSSBytes)
	}
}

// TestDiskExceeded: a job writes past its bound, gets EDQUOT (ENOSPC on a
// tmpfs), and fails: its outcome is disk_exceeded, with a reason that names
// the bound, and what it wrote is still in /out to be returned. A job that
// fails with room to spare has failed, no more.
func TestDiskExceeded(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		nodeDisk int64
	}{{"quota", 0}, {"tmpfs", -1}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newExecutor(t, Config{DiskBytes: c.nodeDisk})
			s := spec("too-big", sh(`echo begun > /out/log.txt; dd if=/dev/zero of=/out/part bs=1M count=64 || exit 3`))
			s.DiskBytes = 16 << 20
			ws := prepare(t, e, s)
			r := finish(t, context.Background(), e, ws)
			if r.res.Outcome != events.DiskExceeded {
				t.Fatalf("outcome %s (%s), want disk_exceeded", r.res.Outcome, r.res.Reason)
			}
			if !strings.Contains(r.res.Reason, "16777216-byte disk bound") || !strings.Contains(r.res.Reason, "exited with code 3") {
				t.Errorf("reason %q does not name the bound and the exit", r.res.Reason)
			}
			if r.res.ExitCode == nil || *r.res.ExitCode != 3 {
				t.Errorf("exit code %s, want 3", deref(r.res.ExitCode))
			}
			if got := readFile(t, filepath.Join(ws.Dirs().OutDir, "log.txt")); got != "begun\n" {
				t.Errorf("partial output log.txt: %q", got)
			}
			if fi, err := os.Stat(filepath.Join(ws.Dirs().OutDir, "part")); err != nil || fi.Size() == 0 || fi.Size() > 16<<20 {
				t.Errorf("partial output part: %v %v, want some and at most 16 MiB", fi, err)
			}

			s = spec("fails", sh(`dd if=/dev/zero of=/out/some bs=1M count=4 2>/dev/null; exit 1`))
			s.DiskBytes = 16 << 20
			r = runJob(t, e, s, nil)
			if r.res.Outcome != events.Failed {
				t.Errorf("a job that failed with room to spare: outcome %s (%s), want failed", r.res.Outcome, r.res.Reason)
			}
		})
	}
}

// TestQuotasApart: two jobs at once, each bound at 32 MiB, each hold 24 MiB
// and then write 4 MiB more: together they hold far more than either bound,
// and neither sees the other's. The node reads each one's usage apart. Then
// a job in a slot they used gets its whole bound, not what is left of it.
func TestQuotasApart(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	script := sh(`
dd if=/dev/zero of=/out/a bs=1M count=24 2>/dev/null || exit 1
touch /out/written
while [ ! -e /out/go ]; do sleep 0.02; done
dd if=/dev/zero of=/tmp/b bs=1M count=4 2>/dev/null || exit 2
`)
	var wss []executor.Job
	for _, id := range []string{"left", "right"} {
		s := spec(id, script)
		s.DiskBytes = 32 << 20
		wss = append(wss, prepare(t, e, s))
	}
	results := make([]executor.Result, len(wss))
	errs := make([]error, len(wss))
	var wg sync.WaitGroup
	for i, ws := range wss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = ws.Run(context.Background())
		}()
	}
	for _, ws := range wss {
		waitFor(t, "both jobs to hold 24 MiB", 30*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(ws.Dirs().OutDir, "written"))
			return err == nil
		})
	}
	for _, ws := range wss {
		used, bound, full, err := ws.(*job).ws.Usage()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d of %d bytes", ws.Spec().JobID, used, bound)
		if used < 24<<20 || used > 25<<20 || bound != 32<<20 || full {
			t.Errorf("%s holds %d of %d bytes (full %v), want its own 24 MiB of 32", ws.Spec().JobID, used, bound, full)
		}
		writeFile(t, filepath.Join(ws.Dirs().OutDir, "go"), "")
	}
	wg.Wait()
	for i, res := range results {
		if errs[i] != nil || res.Outcome != events.Succeeded {
			t.Errorf("%s: outcome %s (%s, %v), want succeeded", wss[i].Spec().JobID, res.Outcome, res.Reason, errs[i])
		}
	}
	for _, ws := range wss {
		if err := ws.Release(); err != nil {
			t.Fatal(err)
		}
	}

	s := spec("next", sh(`dd if=/dev/zero of=/out/c bs=1M count=28 2>&1`))
	s.DiskBytes = 32 << 20
	ws := prepare(t, e, s)
	if ws.Dirs().Root != wss[0].Dirs().Root && ws.Dirs().Root != wss[1].Dirs().Root {
		t.Fatalf("next job got a new slot %s", ws.Dirs().Root)
	}
	if r := finish(t, context.Background(), e, ws); r.res.Outcome != events.Succeeded {
		t.Errorf("28 MiB in a used slot bound at 32: outcome %s (%s), want succeeded", r.res.Outcome, r.res.Reason)
	}
}

// BenchmarkSandboxTrueTmpfs is BenchmarkSandboxTrue on a node without a job
// disk, whose jobs' /out and /tmp are a tmpfs (as before the job disk): the
// two must cost the same.
func BenchmarkSandboxTrueTmpfs(b *testing.B) {
	e := newExecutor(b, Config{DiskBytes: -1})
	ctx := context.Background()
	defer reportCPU(b)()
	for i := 0; b.Loop(); i++ {
		ws, err := e.Prepare(ctx, executor.Spec{JobID: "bench", Attempt: i, Command: []string{"/bin/true"},
			CPU: 1, MemoryBytes: 64 << 20, DiskBytes: 16 << 20, Limit: time.Minute, Grace: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := ws.Run(ctx); err != nil || res.Outcome != events.Succeeded {
			b.Fatalf("run: %v %s", err, res.Reason)
		}
		if err := ws.Release(); err != nil {
			b.Fatal(err)
		}
	}
}
