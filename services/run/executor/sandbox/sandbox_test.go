//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
)

// TestHonestJob is the ordinary case: a job reads /data, writes /out, sees
// its E31_ variables and runs ordinary tools, and RUN finds its output.
func TestHonestJob(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	s := spec("honest", sh(`
set -e
echo "in=$(cat /data/clips/a.txt)"
ls /data/clips | wc -l > /out/count.txt
echo "job=$E31_JOB_ID data=$E31_DATA output=$E31_OUTPUT home=$HOME lang=$LANG"
echo "uid=$(id -u)"
echo "user=$(id -un)"
echo "pwd=$(pwd)"
echo "host=$(hostname)"
echo scratch > /tmp/scratch && echo "tmp=$(cat /tmp/scratch)"
echo "pid=$$"
echo "awk=$(echo 3 4 | awk '{print $1*$2}')"
echo "sort=$(printf 'b\na\n' | sort | tr -d '\n')"
if [ -x /usr/bin/python3 ]; then echo "py=$(python3 -c 'import json,sys; print(json.dumps({"v": sys.version_info[0]}))')"; fi
mkdir -p /out/sub && echo nested > /out/sub/f
`))
	s.Env = map[string]string{"LANG": "C", "E31_JOB_ID": "spoofed"}
	r := runJob(t, e, s, func(ws executor.Job) {
		dir := filepath.Join(ws.Dirs().DataDir, "clips")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "a.txt"), "alpha")
		writeFile(t, filepath.Join(dir, "b.txt"), "beta")
	})
	if r.res.Outcome != events.Succeeded || r.res.ExitCode == nil || *r.res.ExitCode != 0 {
		t.Fatalf("outcome %s exit %s: %s\n%s", r.res.Outcome, deref(r.res.ExitCode), r.res.Reason, r.stderr)
	}
	got := lines(r.stdout)
	want := map[string]string{
		"in":  "alpha",
		"job": "honest data=/data output=/out home=/tmp lang=C",
		"uid": strconv.Itoa(r.uid), "user": "job", "pwd": "/tmp", "host": "e31",
		"tmp": "scratch", "pid": "1", "awk": "12", "sort": "ab",
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		want["py"] = `{"v": 3}`
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if r.uid == 0 {
		t.Error("job ran as root")
	}
	if c := readFile(t, filepath.Join(r.ws.Dirs().OutDir, "count.txt")); strings.TrimSpace(c) != "2" {
		t.Errorf("out/count.txt = %q, want 2", c)
	}
	if c := readFile(t, filepath.Join(r.ws.Dirs().OutDir, "sub", "f")); c != "nested\n" {
		t.Errorf("out/sub/f = %q", c)
	}
	if r.res.Usage.CPUSeconds <= 0 || r.res.Usage.MaxRSSBytes <= 0 {
		t.Errorf("usage not measured: %+v", r.res.Usage)
	}
	if !r.res.Stopped.After(r.res.Started) {
		t.Errorf("started %v, stopped %v", r.res.Started, r.res.Stopped)
	}
}

// TestExitCodes maps how pid 1 ended to outcomes.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	for _, c := range []struct {
		name    string
		cmd     []string
		outcome events.Outcome
		code    string
	}{
		{"zero", []string{"true"}, events.Succeeded, "0"},
		{"three", sh("exit 3"), events.Failed, "3"},
		// pid 1 ignores signals it has no handler for, even its own; a
		// fault is forced on it.
		{"segfault", []string{"python3", "-c", "import ctypes; ctypes.string_at(0)"}, events.Failed, "none"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.cmd[0] == "python3" {
				if _, err := os.Stat("/usr/bin/python3"); err != nil {
					t.Skip("no /usr/bin/python3")
				}
			}
			r := runJob(t, e, spec("exit-"+c.name, c.cmd), nil)
			if r.res.Outcome != c.outcome || deref(r.res.ExitCode) != c.code {
				t.Errorf("outcome %s exit %s (%s), want %s exit %s", r.res.Outcome, deref(r.res.ExitCode), r.res.Reason, c.outcome, c.code)
			}
		})
	}
}

// TestCommandNotFound is a job that cannot start: Run says so with an error.
func TestCommandNotFound(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	ws := prepare(t, e, spec("missing", []string{"no-such-program"}))
	_, err := ws.Run(context.Background())
	if !errors.Is(err, errNotFound) {
		t.Fatalf("err = %v, want not found", err)
	}
	assertNothingLeft(t, e, ws)
}

// TestCancel stops a running job when its context is cancelled.
func TestCancel(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	ws := prepare(t, e, spec("cancel", sh("echo up > /out/ready; while :; do sleep 1; done")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		waitFor(t, "job to start", 10*time.Second, func() bool {
			_, err := os.Stat(filepath.Join(ws.Dirs().OutDir, "ready"))
			return err == nil
		})
		cancel()
	}()
	r := finish(t, ctx, e, ws)
	if r.res.Outcome != events.Cancelled || r.res.ExitCode != nil {
		t.Errorf("outcome %s exit %s, want cancelled without exit code", r.res.Outcome, deref(r.res.ExitCode))
	}
}

// TestReleaseLeavesNothing checks the node after Release: nothing of the
// job in its workspace, no mount, an empty cgroup, the uid free again; and
// after Close, no workspace and no cgroup at all.
func TestReleaseLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{UIDBase: 2100000, UIDCount: 1})
	ws, err := e.Prepare(context.Background(), spec("release", sh("echo x > /out/x; echo y > /tmp/y")))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ws.Dirs().DataDir, "in"), "input")
	if _, err := e.Prepare(context.Background(), spec("second", sh("true"))); err == nil {
		t.Fatal("a second job got the only uid")
	}
	j := ws.(*job)
	if _, err := ws.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ws.Release(); err != nil {
		t.Fatal(err)
	}
	if err := ws.Release(); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if _, err := os.Lstat(ws.Dirs().OutDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("output still there: %v", err)
	}
	if ents, err := os.ReadDir(ws.Dirs().DataDir); err != nil || len(ents) != 0 {
		t.Errorf("data not emptied: %v %v", ents, err)
	}
	// What stays mounted is the slot's writable space (its subvolume of
	// the job disk), empty, and nothing else.
	mounts := readFile(t, "/proc/self/mountinfo")
	for _, l := range strings.Split(mounts, "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], ws.Dirs().Root) && f[4] != filepath.Join(ws.Dirs().Root, "rw") {
			t.Errorf("workspace still mounted: %s", l)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(ws.Dirs().Root, "rw")); err != nil || len(ents) != 0 {
		t.Errorf("writable space not emptied: %v %v", ents, err)
	}
	if ps, err := j.cg.procs(); err != nil || len(ps) != 0 {
		t.Errorf("cgroup of the slot holds %v (%v)", ps, err)
	}
	if _, err := ws.Run(context.Background()); err == nil {
		t.Error("ran a released workspace")
	}
	ws2, err := e.Prepare(context.Background(), spec("second", sh("true")))
	if err != nil {
		t.Fatalf("uid not freed: %v", err)
	}
	if ws2.Dirs().Root != ws.Dirs().Root {
		t.Errorf("second job got workspace %s, want the released slot's %s", ws2.Dirs().Root, ws.Dirs().Root)
	}
	if ents, err := os.ReadDir(ws2.Dirs().OutDir); err != nil || len(ents) != 0 {
		t.Errorf("second job's /out holds %v (%v)", ents, err)
	}
	if err := ws2.Release(); err != nil {
		t.Fatal(err)
	}

	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(ws.Dirs().Root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace still there after Close: %v", err)
	}
	if mounts := readFile(t, "/proc/self/mountinfo"); strings.Contains(mounts, e.cfg.Root) {
		t.Errorf("something of the executor still mounted after Close:\n%s", mounts)
	}
	cg, _ := j.cg.(*cgroup1Job)
	for name, dir := range cg.dirsOrNil() {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s cgroup %s still there after Close", name, dir)
		}
	}
	// Closed, it still runs jobs, in slots it does not keep.
	r := runJob(t, e, spec("after-close", sh("echo ok")), nil)
	if r.res.Outcome != events.Succeeded || r.stdout != "ok\n" {
		t.Errorf("job after Close: %s %q", r.res.Outcome, r.stdout)
	}
}

// dirsOrNil is the job's cgroup directories on a v1 host.
func (j *cgroup1Job) dirsOrNil() map[string]string {
	if j == nil {
		return nil
	}
	out := map[string]string{}
	for n, d := range j.dirs {
		out[string(n)] = d
	}
	return out
}

// TestConcurrentJobs runs jobs at once on one executor: each sees only its
// own data, writes only its own output, and has a uid, a workspace and a
// network namespace of its own.
func TestConcurrentJobs(t *testing.T) {
	t.Parallel()
	e := newExecutor(t, Config{})
	const n = 16
	type result struct {
		i   int
		out string
		ws  executor.Job
		err string
	}
	// Every job is prepared before any runs, and released after all ran:
	// all sixteen hold their slots at once.
	var prepared, ran sync.WaitGroup
	prepared.Add(n)
	ran.Add(n)
	results := make(chan result, n)
	for i := range n {
		go func() {
			s := spec(fmt.Sprintf("many-%d", i), sh(`cat /data/id > /out/id; ls /data | wc -l > /out/n; id -u > /out/uid; readlink /proc/self/ns/net > /out/net`))
			ws, err := e.Prepare(context.Background(), s)
			prepared.Done()
			if err != nil {
				ran.Done()
				results <- result{i: i, err: err.Error()}
				return
			}
			defer func() {
				if err := ws.Release(); err != nil {
					t.Errorf("release the workspace: %v", err)
				}
			}()
			prepared.Wait()
			err = os.WriteFile(filepath.Join(ws.Dirs().DataDir, "id"), []byte(strconv.Itoa(i)), 0o644)
			if err == nil {
				_, err = ws.Run(context.Background())
			}
			ran.Done()
			if err != nil {
				results <- result{i: i, err: err.Error()}
				return
			}
			out := readFileQuiet(filepath.Join(ws.Dirs().OutDir, "id")) + " " +
				strings.TrimSpace(readFileQuiet(filepath.Join(ws.Dirs().OutDir, "n"))) + " " +
				strings.TrimSpace(readFileQuiet(filepath.Join(ws.Dirs().OutDir, "uid"))) + " " +
				strings.TrimSpace(readFileQuiet(filepath.Join(ws.Dirs().OutDir, "net")))
			ran.Wait()
			results <- result{i: i, out: out, ws: ws}
		}()
	}
	seen := map[string]int{}
	for range n {
		res := <-results
		if res.err != "" {
			t.Errorf("job %d: %s", res.i, res.err)
			continue
		}
		f := strings.Fields(res.out)
		if len(f) != 4 || f[0] != strconv.Itoa(res.i) || f[1] != "1" {
			t.Errorf("job %d saw %q, want its own id and one data file", res.i, res.out)
			continue
		}
		for _, k := range []string{"uid " + f[2], "network namespace " + f[3], "workspace " + res.ws.Dirs().Root} {
			if prev, ok := seen[k]; ok {
				t.Errorf("jobs %d and %d ran with the same %s", prev, res.i, k)
			}
			seen[k] = res.i
		}
	}
}

func readFileQuiet(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestStaleCleanup: a node agent that died left a workspace and a cgroup
// (here with a job still in it); the next executor over the same root
// removes both and kills the job.
func TestStaleCleanup(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	old := newExecutor(t, Config{Root: root})
	ws := prepare(t, old, spec("stale", sh("echo up > /out/up; while :; do sleep 1; done")))
	done := make(chan executor.Result, 1)
	go func() {
		res, err := ws.Run(context.Background())
		if err != nil {
			t.Errorf("run: %v", err)
		}
		done <- res
	}()
	waitFor(t, "job to start", 10*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(ws.Dirs().OutDir, "up"))
		return err == nil
	})
	uid := ws.(*job).uid

	newExecutor(t, Config{Root: root})
	select {
	case res := <-done:
		if res.Outcome != events.Failed || !strings.Contains(res.Reason, "SIGKILL") {
			t.Errorf("stale job ended %s (%s), want killed", res.Outcome, res.Reason)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stale job still running")
	}
	if _, err := os.Lstat(ws.Dirs().Root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale workspace still there: %v", err)
	}
	if strings.Contains(readFile(t, "/proc/self/mountinfo"), ws.Dirs().Root) {
		t.Error("stale workspace still mounted")
	}
	if left := hostProcsOfUID(t, uid); len(left) != 0 {
		t.Errorf("stale job processes alive: %v", left)
	}
}
