//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// TestSubmitOfOneGiBKeepsTheCLISmall builds the e31 binary, submits a job
// with 1 GiB of data with it, as a user would, and reads the CLI's peak
// resident memory from the kernel (its high-water mark, VmHWM): it stays under
// 100 MiB whatever the size of the data, because files are hashed and sent
// through fixed buffers. It needs about 2 GiB of disk and half a minute;
// -short or E31_STAGE_HUGE=0 skips it.
func TestSubmitOfOneGiBKeepsTheCLISmall(t *testing.T) {
	if testing.Short() || os.Getenv("E31_STAGE_HUGE") == "0" {
		t.Skip("stages 1 GiB; skipped with -short or E31_STAGE_HUGE=0")
	}
	const size = 1 << 30
	const limit = 100 << 20

	bin := e31Bin
	// The system runs as its own process, built like the CLI: neither is
	// slowed by the race detector or shares a process with other tests.
	url, credsDir := startDevProcess(t, bin)

	// A job no node can hold: it is refused once staged, so that only the
	// staging is measured.
	job := writeRSSJob(t, `
work: {command: ["/bin/true"]}
data: [{name: big, path: ./big.bin}]
request: {cpu: 64, memory: 32MiB, limit: 1m}
`, nil)
	want := writeRandomFile(t, filepath.Join(filepath.Dir(job), "big.bin"), size)

	start := time.Now()
	cmd := exec.Command(bin, "submit", "--quiet", "--json", job, "--nats", url, "--creds", filepath.Join(credsDir, "alice.creds"), "--log-level", "warn")
	cmd.Stderr = os.Stderr
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The CLI's own high-water mark, read while it runs. Not its rusage:
	// Go starts a child with vfork, the child shares this process's memory
	// until it execs, and the kernel keeps the larger of the two peaks, so
	// ru_maxrss is this test's own peak whenever that is the larger. A
	// high-water mark only grows: a read every 20 ms misses only what the
	// last 20 ms of a run that takes seconds might add.
	var peak int64
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		peak = max(peak, int64(statusKiB(cmd.Process.Pid, "VmHWM:"))<<10)
		select {
		case err = <-waited:
			break wait
		case <-tick.C:
		}
	}
	took := time.Since(start)
	out := stdout.Bytes()
	if err != nil {
		t.Fatalf("e31 submit: %v: %s", err, out)
	}
	if peak == 0 {
		t.Fatal("the CLI's peak resident memory could not be read from /proc")
	}
	t.Logf("e31 submit of 1 GiB: %s (%.0f MB/s, hashing included), peak RSS %d MiB", took.Round(time.Millisecond), size/took.Seconds()/1e6, peak>>20)
	if peak >= limit {
		t.Errorf("the CLI's peak RSS was %d MiB staging 1 GiB; the bound is %d MiB", peak>>20, limit>>20)
	}

	var r struct{ ID string }
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("e31 submit printed %q", out)
	}
	nc, err := nats.Connect(url, nats.UserCredentials(filepath.Join(credsDir, "operator.creds")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := bus.ReadJob(rssCtx(t), js, r.ID, 1)
	if err != nil || len(evs) == 0 {
		t.Fatalf("job %s: %v", r.ID, err)
	}
	req, ok := evs[0].Event.(*events.JobRequested)
	if !ok || len(req.Spec.Data) != 1 || req.Spec.Data[0].Digest != want || req.Spec.Data[0].Bytes != size {
		t.Fatalf("first event %+v; want a request for %s", evs[0].Event, want)
	}
}

// startDevProcess starts `bin dev` with alice as a submitter and returns its
// NATS URL and credentials folder; it is stopped (SIGTERM) when the test ends.
func startDevProcess(t *testing.T, bin string) (url, credsDir string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin, "dev", "--dir", dir, "--listen", "127.0.0.1:0", "--users", "alice", "--executor", "process", "--sync", "interval")
	cmd.Env = append(os.Environ(), "USER=alice", "XDG_CONFIG_HOME="+t.TempDir())
	cmd.Stderr = io.Discard
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("e31 dev exited with %v after SIGTERM, want 0", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("e31 dev did not stop within 30 s of SIGTERM")
		}
	})
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		line := lines.Text()
		if rest, ok := strings.CutPrefix(line, "e31 dev: NATS JetStream listening on "); ok {
			url, _, _ = strings.Cut(rest, " ")
		}
		if strings.Contains(line, "press Ctrl-C") {
			go func() {
				_, _ = io.Copy(io.Discard, stdout)
				exited <- cmd.Wait()
			}()
			return url, filepath.Join(dir, "creds")
		}
	}
	exited <- cmd.Wait()
	t.Fatalf("e31 dev exited before it was ready (url %q)", url)
	return "", ""
}

// writeRandomFile writes size pseudo-random bytes and returns their digest.
func writeRandomFile(t *testing.T, p string, size int64) string {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.NewChaCha8([32]byte{6}), size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// writeRSSJob writes a job file into a fresh folder.
func writeRSSJob(t *testing.T, yaml string, _ map[string]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func rssCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
