package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/services/run"
)

// The first five minutes: `e31 dev` in one terminal, `e31 submit --wait`
// in another, with no credentials exported. e31 dev writes the running
// user's credentials and notes where; the CLI finds them for that server
// only.
func TestTheCLIFindsTheCredentialsEDevWroteForItsUser(t *testing.T) {
	config := t.TempDir()
	t.Setenv("USER", "carol")
	t.Setenv("XDG_CONFIG_HOME", config)
	t.Setenv("E31_CREDS", "")
	t.Setenv("E31_NATS", "")

	a := &app{env: readEnv(), out: io.Discard, errOut: io.Discard}
	a.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sys, err := startDev(context.Background(), a, devOptions{dir: t.TempDir(), listen: "127.0.0.1:0", nodes: 1,
		node: run.Config{CPU: 1, MemoryBytes: jobfile.GiB, DiskBytes: jobfile.GiB, ExecutorKind: testExecutor, Grace: 500 * time.Millisecond},
		sync: "interval"})
	if err != nil {
		t.Fatalf("start e31 dev: %v", err)
	}
	t.Cleanup(func() {
		if err := sys.Stop(); err != nil {
			t.Errorf("stop e31 dev: %v", err)
		}
	})
	if _, err := os.Stat(sys.CredsFile("carol")); err != nil {
		t.Fatalf("e31 dev wrote no credentials for the user who runs it: %v", err)
	}

	job := writeJob(t, "work: {command: [/bin/sh, -c, 'echo hi > /out/hi.txt']}\nrequest: {cpu: 0.1, memory: 16MiB, limit: 30s}\noutput: [hi.txt]\n", nil)
	var out, errOut bytes.Buffer
	code := execute([]string{"submit", "--wait", "--nats", sys.Broker().ClientURL(), "--log-level", "debug", job}, &out, &errOut)
	if code != 0 {
		t.Fatalf("e31 submit --wait with no credentials given: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	if want := filepath.Join("creds", "carol.creds"); !strings.Contains(errOut.String(), want) {
		t.Errorf("--log-level debug does not say which credentials were used (want %s):\n%s", want, errOut.String())
	}

	// A server no e31 dev noted is a deployment: nothing is guessed.
	out.Reset()
	errOut.Reset()
	code = execute([]string{"status", "--nats", "nats://127.0.0.1:1", "x"}, &out, &errOut)
	if code == 0 || strings.Contains(errOut.String(), "carol.creds") {
		t.Errorf("a server no e31 dev noted: exit %d, credentials guessed:\n%s", code, errOut.String())
	}
}
