//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nobody is the unprivileged uid and gid the node is run as.
const nobody = 65534

// TestNodeWithoutRootRefusesToStart builds the e31 binary and runs it as an
// unprivileged user, as an operator without root would: `e31 dev` and `e31
// serve run`, with the default executor (auto), refuse to start, before
// they start or touch anything, with a message that names root and
// --executor process; they never run jobs unisolated behind a warning.
// With --executor process, the operator's explicit choice, `e31 dev` runs.
func TestNodeWithoutRootRefusesToStart(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("runs e31 as another user: needs root")
	}
	// A directory the unprivileged user can reach, with the binary in it.
	dir, err := os.MkdirTemp("", "e31-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "e31")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	asNobody := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin", "TMPDIR=" + dir}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
		return cmd
	}

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"dev", []string{"dev", "--dir", filepath.Join(dir, "state"), "--listen", "127.0.0.1:0"}},
		{"dev-sandbox", []string{"dev", "--dir", filepath.Join(dir, "state"), "--listen", "127.0.0.1:0", "--executor", "sandbox"}},
		// A NATS URL nobody answers: the node must refuse before it dials.
		{"serve-run", []string{"serve", "run", "--node", "n1", "--nats", "nats://127.0.0.1:1", "--work-dir", filepath.Join(dir, "work")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := asNobody(ctx, tc.args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			t.Logf("e31 %s as uid %d: %v\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), nobody, err, stdout.String(), stderr.String())
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 || ctx.Err() != nil {
				t.Fatalf("e31 %s as uid %d: %v, want a refusal with a non-zero exit", tc.name, nobody, err)
			}
			msg := stderr.String()
			for _, want := range []string{"cannot isolate jobs", "root", "--executor process"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the refusal does not say %q: %s", want, msg)
				}
			}
			for _, p := range []string{"state", "work"} {
				if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
					t.Errorf("it made %s before refusing", p)
				}
			}
		})
	}

	t.Run("dev-process", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := asNobody(ctx, "dev", "--dir", filepath.Join(dir, "unisolated"), "--listen", "127.0.0.1:0", "--executor", "process")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := false
		for sc := bufio.NewScanner(out); sc.Scan(); {
			if strings.Contains(sc.Text(), "press Ctrl-C to stop") {
				ready = true
				break
			}
		}
		if ready {
			_ = cmd.Process.Signal(os.Interrupt)
		}
		err = cmd.Wait()
		if !ready || err != nil {
			t.Fatalf("e31 dev --executor process as uid %d: ready %v, %v\n%s", nobody, ready, err, stderr.String())
		}
		if !strings.Contains(stderr.String(), "NOT isolated") {
			t.Errorf("e31 dev --executor process does not say that jobs are not isolated:\n%s", stderr.String())
		}
	})
}
