//go:build linux

package container

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/services/run/executor"
)

const probeImage = "e31-test-probe:latest"

var (
	imageOnce sync.Once
	imageErr  error
)

// newExecutor returns an executor and makes sure the probe image exists, or
// skips the test when not root or when there is no engine.
func newExecutor(t *testing.T) *Executor {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING CONTAINER TESTS: they need root; CI runs them as root")
	}
	ctx := context.Background()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		t.Skipf("SKIPPING CONTAINER TESTS: no Docker engine: %v", err)
	}
	imageOnce.Do(func() { imageErr = buildProbe(ctx, cli) })
	if imageErr != nil {
		t.Fatalf("build probe image: %v", imageErr)
	}
	e, err := New(ctx, Config{Root: t.TempDir(), Client: cli, UIDBase: 2300000, Logger: slog.New(slog.DiscardHandler), Images: testImages{}})
	if err != nil {
		t.Fatal(err)
	}
	// After the jobs' workspaces are released (their cleanups run first):
	// the job disk is unmounted before the root is removed.
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

// buildProbe compiles testdata/probe statically and builds an image FROM
// scratch holding only it: no registry is needed.
func buildProbe(ctx context.Context, cli *client.Client) error {
	dir, err := os.MkdirTemp("", "e31-probe")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "probe")
	// go test puts its own GOROOT/bin first on a test's PATH.
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("find the go command to build the probe: %w", err)
	}
	cmd := exec.Command(goBin, "build", "-o", bin, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build probe: %v\n%s", err, out)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"Dockerfile", 0o644, []byte("FROM scratch\nCOPY probe /probe\n")},
		{"probe", 0o755, exe},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data))}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{probeImage}, Remove: true, ForceRemove: true})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return fmt.Errorf("image build: %s", m.Error)
		}
	}
}

// testImages allows the probe image to the test's submitter alone.
type testImages struct{}

func (testImages) Limits(_ context.Context, submitter string) (limits.Limits, error) {
	l := limits.Limits{Submitter: submitter}
	if submitter == "tester" {
		l.Images = []string{probeImage}
	}
	return l, nil
}

// TestAnImageNotAllowedIsRefused: the node refuses an image its policy
// does not allow the job's submitter, present on the node as it is.
func TestAnImageNotAllowedIsRefused(t *testing.T) {
	t.Parallel()
	e := newExecutor(t)
	s := spec("c-other-tenant")
	s.Submitter = "mallory"
	ws, err := e.Prepare(context.Background(), s)
	if !errors.Is(err, ErrImageNotAllowed) {
		if err == nil {
			_ = ws.Release()
		}
		t.Fatalf("Prepare of mallory's job naming %s: err = %v, want ErrImageNotAllowed", probeImage, err)
	}
	if want := `image "` + probeImage + `" is not allowed for mallory; allowed: none`; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

func spec(id string, args ...string) executor.Spec {
	return executor.Spec{
		JobID: id, Submitter: "tester", Image: probeImage, Command: append([]string{"/probe"}, args...),
		CPU: 1, MemoryBytes: 128 << 20, DiskBytes: 16 << 20,
		Limit: 30 * time.Second, Grace: 500 * time.Millisecond,
	}
}

type ran struct {
	ws     executor.Job
	res    executor.Result
	stdout string
	got    map[string]string
}

func run(t *testing.T, ctx context.Context, e *Executor, s executor.Spec, stage func(executor.Job)) *ran {
	t.Helper()
	ws, err := e.Prepare(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ws.Release(); err != nil {
			t.Errorf("release: %v", err)
		}
	})
	if stage != nil {
		stage(ws)
	}
	res, err := ws.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := LogPaths(ws)
	out, _ := os.ReadFile(stdout)
	errb, _ := os.ReadFile(stderr)
	t.Logf("%s: outcome=%s reason=%q usage=%+v\nstdout:\n%s\nstderr:\n%s", s.JobID, res.Outcome, res.Reason, res.Usage, out, errb)
	got := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = v
		}
	}
	// Nothing of the job is left running on the node.
	ps, err := e.cli.ContainerList(context.Background(), containerListAll(s.JobID))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ps {
		if c.State == "running" {
			t.Errorf("container %s of job %s still running", c.ID, s.JobID)
		}
	}
	return &ran{ws: ws, res: res, stdout: string(out), got: got}
}

// TestHonestJob: data in, output out, E31_ variables, no network, a
// read-only image, an unprivileged user without capabilities.
func TestHonestJob(t *testing.T) {
	t.Parallel()
	e := newExecutor(t)
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	// Only loopback as a target: inside the container 127.0.0.1 is its own,
	// and the interface list shows it has no route to anything else.
	s := spec("c-honest", "honest", "127.0.0.1:"+port)
	r := run(t, context.Background(), e, s, func(ws executor.Job) {
		if err := os.WriteFile(filepath.Join(ws.Dirs().DataDir, "in.txt"), []byte("alpha"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if r.res.Outcome != events.Succeeded {
		t.Fatalf("outcome %s: %s", r.res.Outcome, r.res.Reason)
	}
	for k, want := range map[string]string{
		"in": "alpha err=<nil>", "env": "c-honest /data /out", "host": "e31", "out": "<nil>", "tmp": "<nil>",
		"ifaces": "lo", "CapEff": "0000000000000000", "NoNewPrivs": "1", "done": "1",
	} {
		if r.got[k] != want {
			t.Errorf("%s = %q, want %q", k, r.got[k], want)
		}
	}
	if uid, _ := strconv.Atoi(r.got["uid"]); uid < 2300000 {
		t.Errorf("job ran as uid %s", r.got["uid"])
	}
	for _, k := range []string{"wrote", "connected"} {
		if v, ok := r.got[k]; ok {
			t.Errorf("job %s %s", k, v)
		}
	}
	_ = l.(*net.TCPListener).SetDeadline(time.Now())
	if c, err := l.Accept(); err == nil {
		t.Errorf("host listener accepted a connection from %s", c.RemoteAddr())
	}
	if b, _ := os.ReadFile(filepath.Join(r.ws.Dirs().OutDir, "result.txt")); string(b) != "done" {
		t.Errorf("out/result.txt = %q", b)
	}
	if r.res.Usage.CPUSeconds <= 0 || r.res.Usage.MaxRSSBytes <= 0 {
		t.Errorf("usage not measured: %+v", r.res.Usage)
	}
}

// TestOutcomes: exit codes, memory, the limit, cancellation.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	e := newExecutor(t)
	t.Run("failed", func(t *testing.T) {
		r := run(t, context.Background(), e, spec("c-exit", "exit"), nil)
		if r.res.Outcome != events.Failed || r.res.ExitCode == nil || *r.res.ExitCode != 3 {
			t.Errorf("outcome %s exit %v", r.res.Outcome, r.res.ExitCode)
		}
	})
	t.Run("oom", func(t *testing.T) {
		s := spec("c-oom", "alloc")
		s.MemoryBytes = 48 << 20
		r := run(t, context.Background(), e, s, nil)
		if r.res.Outcome != events.OutOfMemory {
			t.Errorf("outcome %s (%s), want out_of_memory", r.res.Outcome, r.res.Reason)
		}
	})
	t.Run("limit", func(t *testing.T) {
		s := spec("c-limit", "stubborn")
		s.Limit = time.Second
		r := run(t, context.Background(), e, s, nil)
		if r.res.Outcome != events.LimitExceeded || r.res.ExitCode != nil {
			t.Errorf("outcome %s exit %v, want limit_exceeded", r.res.Outcome, r.res.ExitCode)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := spec("c-cancel", "stubborn")
		ws, err := e.Prepare(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := ws.Release(); err != nil {
				t.Errorf("release the workspace: %v", err)
			}
		}()
		go func() {
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := os.Stat(filepath.Join(ws.Dirs().OutDir, "ready")); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
		}()
		res, err := ws.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != events.Cancelled {
			t.Errorf("outcome %s, want cancelled", res.Outcome)
		}
	})
}

// TestLimits: cpu 0.5 for two spinning threads, and the disk bound.
func TestLimits(t *testing.T) {
	t.Parallel()
	e := newExecutor(t)
	t.Run("cpu", func(t *testing.T) {
		s := spec("c-cpu", "spin", "3s")
		s.CPU = 0.5
		r := run(t, context.Background(), e, s, nil)
		wall := r.res.Stopped.Sub(r.res.Started).Seconds()
		if cpu := r.res.Usage.CPUSeconds; cpu > 0.5*wall*1.15+0.05 || cpu < 0.1*wall {
			t.Errorf("cpu %.2fs over %.2fs wall, want about half", cpu, wall)
		}
	})
	t.Run("disk", func(t *testing.T) {
		s := spec("c-disk", "fill")
		s.DiskBytes = 8 << 20
		r := run(t, context.Background(), e, s, nil)
		if e.disk != nil && !strings.Contains(r.got["err"], "disk quota exceeded") ||
			e.disk == nil && !strings.Contains(r.got["err"], "no space left on device") {
			t.Errorf("err = %q, want EDQUOT (ENOSPC in a tmpfs)", r.got["err"])
		}
		if n, _ := strconv.Atoi(r.got["size"]); n == 0 || n > 8<<20 {
			t.Errorf("wrote %s bytes, want at most 8 MiB", r.got["size"])
		}
	})
}

// containerListAll lists the containers of a job, running or not.
func containerListAll(job string) dcontainer.ListOptions {
	return dcontainer.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", jobLabel+"="+job))}
}
