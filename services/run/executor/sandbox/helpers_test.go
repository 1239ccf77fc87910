//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/e31net/e31/services/run/executor"
)

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) next() int { return int(c.n.Add(1)) }

// newExecutor returns an executor over a temporary root, or skips the test
// when not running as root.
func newExecutor(tb testing.TB, cfg Config) *Executor {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("SKIPPING SANDBOX TESTS: they need root (namespaces, cgroups, mounts); CI runs them as root")
	}
	if cfg.Root == "" {
		cfg.Root = tb.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.Close(); err != nil {
			tb.Errorf("close executor: %v", err)
		}
	})
	return e
}

// sh is the command of a job that runs a shell script.
func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// spec is a job with small limits; tests change what they attack.
func spec(id string, cmd []string) executor.Spec {
	return executor.Spec{
		JobID: id, Command: cmd,
		CPU: 1, MemoryBytes: 128 << 20, DiskBytes: 32 << 20,
		Limit: 20 * time.Second, Grace: 500 * time.Millisecond,
	}
}

// ran is a finished job as the node sees it, before Release.
type ran struct {
	ws     executor.Job
	res    executor.Result
	stdout string
	stderr string
	uid    int
}

// prepare prepares s on e and releases it when the test ends.
func prepare(t *testing.T, e *Executor, s executor.Spec) executor.Job {
	t.Helper()
	ws, err := e.Prepare(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ws.Release(); err != nil {
			t.Errorf("release %s: %v", s.JobID, err)
		}
	})
	return ws
}

// finish runs a prepared job to its end and checks what must hold after
// every job: the cgroup is empty and no host process has the job's uid.
func finish(t *testing.T, ctx context.Context, e *Executor, ws executor.Job) *ran {
	t.Helper()
	j := ws.(*job)
	res, err := ws.Run(ctx)
	if err != nil {
		t.Fatalf("run %s: %v", ws.Spec().JobID, err)
	}
	r := &ran{ws: ws, res: res, uid: j.uid}
	stdout, stderr := LogPaths(ws)
	r.stdout, r.stderr = readFile(t, stdout), readFile(t, stderr)
	t.Logf("%s: outcome=%s reason=%q exit=%v usage=%+v\nstdout:\n%s\nstderr:\n%s",
		ws.Spec().JobID, res.Outcome, res.Reason, deref(res.ExitCode), res.Usage, r.stdout, r.stderr)
	assertNothingLeft(t, e, ws)
	return r
}

// runJob prepares, stages (if stage is not nil) and runs s.
func runJob(t *testing.T, e *Executor, s executor.Spec, stage func(ws executor.Job)) *ran {
	t.Helper()
	ws := prepare(t, e, s)
	if stage != nil {
		stage(ws)
	}
	return finish(t, context.Background(), e, ws)
}

// assertNothingLeft checks the node side after Run: no process in the job's
// cgroup and none in the host's process table with the job's uid.
func assertNothingLeft(t *testing.T, e *Executor, ws executor.Job) {
	t.Helper()
	j := ws.(*job)
	procs, err := j.cg.procs()
	if err != nil {
		t.Fatalf("read job cgroup: %v", err)
	}
	if len(procs) != 0 {
		t.Errorf("job %s: processes left in its cgroup after Run: %v", ws.Spec().JobID, procs)
	}
	if left := hostProcsOfUID(t, j.uid); len(left) != 0 {
		t.Errorf("job %s: host processes with the job's uid %d after Run: %v", ws.Spec().JobID, j.uid, left)
	}
}

// hostProcsOfUID lists host pids whose real uid is uid.
func hostProcsOfUID(t *testing.T, uid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "status"))
		if err != nil {
			continue // exited meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == strconv.Itoa(uid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func deref(p *int) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// lines returns the "key=value" lines of out as a map.
func lines(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}
