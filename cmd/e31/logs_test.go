package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/services/run"
)

// logsOf runs `e31 logs` as alice and returns what it wrote where.
func (ts *testSystem) logsOf(id string, args ...string) (stdout, stderr string) {
	ts.t.Helper()
	out, errOut, code := ts.cli(append([]string{"logs", id}, args...)...)
	if code != 0 {
		ts.t.Fatalf("e31 logs %s: exit %d: %s", id, code, errOut)
	}
	return out, errOut
}

// A job's stdout and stderr come back to its submitter apart, on success,
// failure and at its limit, with the last line it printed; the record says
// how much it wrote, and `e31 wait` shows the end of a failed job's stderr.
func TestLogsComeBackOnSuccessFailureAndLimit(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	cases := []struct {
		name, script, limit string
		outcome             events.Outcome
	}{
		{"success", `echo to stdout; echo to stderr >&2`, "1m", events.Succeeded},
		{"failure", `echo to stdout; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo "err $i" >&2; done; echo to stderr >&2; exit 2`, "1m", events.Failed},
		{"limit", `trap '' TERM; echo to stdout; echo to stderr >&2; while :; do sleep 0.1; done`, "2s", events.LimitExceeded},
	}
	ids := map[string]string{}
	for _, c := range cases {
		ids[c.name] = ts.submit(writeJob(t, fmt.Sprintf(`
work: {command: ["/bin/sh", "-c", %q]}
request: {cpu: 0.5, memory: 64MiB, limit: %s}
`, c.script, c.limit), nil))
	}
	for _, c := range cases {
		id := ids[c.name]
		rec, _ := ts.wait(id)
		if rec.Outcome != c.outcome {
			t.Errorf("%s: outcome %s (%s), want %s", c.name, rec.Outcome, rec.Reason, c.outcome)
			continue
		}
		out, errOut := ts.logsOf(id)
		if out != "to stdout\n" || !strings.HasSuffix(errOut, "to stderr\n") {
			t.Errorf("%s: e31 logs wrote %q to stdout and %q to stderr", c.name, out, errOut)
		}
		if l := rec.Logs; l == nil || l.StdoutBytes != 10 || l.StderrBytes != int64(len(errOut)) || l.Truncated {
			t.Errorf("%s: record's logs = %+v, want 10 bytes of stdout, %d of stderr", c.name, rec.Logs, len(errOut))
		}
	}
	// The bob cannot read alice's logs.
	if _, _, code := ts.cliAs("bob", "logs", ids["success"]); code == 0 {
		t.Error("bob read alice's job's logs")
	}
	out, _, _ := ts.cli("wait", ids["failure"])
	if !strings.Contains(out, "err 12\n") || !strings.Contains(out, "to stderr\n") || strings.Contains(out, "err 1\n") {
		t.Errorf("e31 wait of a failed job does not show the last lines of its stderr:\n%s", out)
	}
}

// A job that writes nothing has an empty, complete log (nothing of it is
// stored, its stop says 0 and 0 bytes): `e31 logs` shows nothing and
// succeeds, as it would for a log stored empty.
func TestLogsOfAJobThatWroteNothing(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	id := ts.submit(writeJob(t, `
work: {command: ["/bin/true"]}
request: {cpu: 0.5, memory: 64MiB, limit: 1m}
`, nil))
	rec, _ := ts.wait(id)
	if rec.Outcome != events.Succeeded {
		t.Fatalf("outcome %s (%s), want succeeded", rec.Outcome, rec.Reason)
	}
	if l := rec.Logs; l == nil || l.StdoutBytes != 0 || l.StderrBytes != 0 || l.Truncated {
		t.Errorf("record's logs = %+v, want 0 and 0 bytes", rec.Logs)
	}
	if out, errOut := ts.logsOf(id); out != "" || errOut != "" {
		t.Errorf("e31 logs wrote %q to stdout and %q to stderr, want nothing", out, errOut)
	}
}

// A stream past the node's cap keeps its head and its tail, the last line
// among it, with a line where the rest was.
func TestLogsPastTheCapKeepTheHeadAndTheTail(t *testing.T) {
	t.Parallel()
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 1, node: run.Config{LogCap: 64 * jobfile.KiB}})
	id := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done; echo the last line; exit 3"]}
request: {cpu: 0.5, memory: 64MiB, limit: 1m}
`, nil))
	rec, _ := ts.wait(id)
	var all strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&all, "line %d\n", i)
	}
	all.WriteString("the last line\n")
	want := all.String()
	if l := rec.Logs; l == nil || l.StdoutBytes != int64(len(want)) || !l.Truncated {
		t.Fatalf("record's logs = %+v, want %d bytes of stdout, truncated", rec.Logs, len(want))
	}
	out, _ := ts.logsOf(id)
	const head, tail = 48 << 10, 16 << 10 // a 64 KiB cap: a quarter of it is the tail
	gap := fmt.Sprintf("\n[e31: %d bytes of stdout not kept]\n", len(want)-head-tail)
	if out != want[:head]+gap+want[len(want)-tail:] {
		t.Errorf("e31 logs wrote %d bytes (starting %q, ending %q), want the first %d, a line, the last %d",
			len(out), out[:min(20, len(out))], out[max(len(out)-30, 0):], head, tail)
	}
}

// `e31 logs --follow` shows what a job writes while it runs, and ends
// when its compute is released; a cancelled job's logs come back too.
func TestFollowSeesALineWhileTheJobRunsAndCancelKeepsTheLogs(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	id := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "echo first line; echo warming up >&2; while :; do sleep 0.1; done"]}
request: {cpu: 0.5, memory: 64MiB, limit: 2m}
`, nil))
	out := &watched{want: "first line\n", seen: make(chan struct{})}
	var errOut bytes.Buffer
	followed := make(chan int, 1)
	go func() {
		followed <- execute([]string{"logs", id, "--follow", "--nats", ts.url, "--creds", ts.creds("alice"), "--log-level", "warn"}, out, &errOut)
	}()
	select {
	case <-out.seen:
	case code := <-followed:
		t.Fatalf("e31 logs --follow ended (exit %d) before the job's first line: %q %s", code, out.String(), errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("e31 logs --follow did not show the running job's first line in 30 s")
	}
	if state := ts.stateOf(id); state != "running" {
		t.Errorf("the line was seen with the job %s, want running", state)
	}
	if _, errOut, code := ts.cli("cancel", id); code != 0 {
		t.Fatalf("e31 cancel: exit %d: %s", code, errOut)
	}
	select {
	case code := <-followed:
		if code != 0 {
			t.Errorf("e31 logs --follow: exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("e31 logs --follow did not end when the job's compute was released")
	}
	rec, _ := ts.wait(id)
	if rec.Outcome != events.Cancelled {
		t.Errorf("outcome %s, want cancelled", rec.Outcome)
	}
	if got := out.String(); got != "first line\n" {
		t.Errorf("followed stdout %q, want the first line once", got)
	}
	if o, e := ts.logsOf(id); o != "first line\n" || !strings.HasPrefix(e, "warming up\n") {
		t.Errorf("the cancelled job's logs: %q and %q", o, e)
	}
}

// stateOf is a job's state as `e31 status --json` says.
func (ts *testSystem) stateOf(id string) string {
	ts.t.Helper()
	rec, err := ts.c.Record(context.Background(), id)
	if err != nil {
		ts.t.Fatal(err)
	}
	return rec.State
}

// watched is a writer that says when what was written so far contains want.
type watched struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watched) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if strings.Contains(w.b.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *watched) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A job killed for its memory leaves its logs too.
func TestLogsOfAJobOutOfMemory(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	id := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "echo before the fall; echo about to eat >&2; python3 -c 'b = bytearray(256 << 20)' || a=x; while :; do a=$a$a; done"]}
request: {cpu: 0.5, memory: 64MiB, limit: 1m}
`, nil))
	rec, _ := ts.wait(id)
	if rec.Outcome != events.OutOfMemory {
		t.Fatalf("outcome %s (%s), want out_of_memory", rec.Outcome, rec.Reason)
	}
	if o, e := ts.logsOf(id); o != "before the fall\n" || !strings.HasPrefix(e, "about to eat\n") {
		t.Errorf("logs of a job out of memory: %q and %q", o, e)
	}
}

// A node that stops cleanly stores the logs of the job it stops; the job,
// held again, has each attempt's own.
func TestLogsSurviveANodeThatStops(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := startSystem(t, dir, 1)
	id := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "echo attempt $E31_ATTEMPT; [ $E31_ATTEMPT -gt 1 ] || while :; do sleep 0.1; done"]}
request: {cpu: 0.5, memory: 64MiB, limit: 2m}
`, nil))
	// Follow until the first line shows: then the job runs, and has written.
	out := &watched{want: "attempt 1\n", seen: make(chan struct{})}
	c := ts.client("alice")
	ctx, stopFollowing := context.WithCancel(context.Background())
	followed := make(chan error, 1)
	go func() { followed <- c.Logs(ctx, id, client.LogsOptions{Follow: true, Stdout: out, Stderr: io.Discard}) }()
	select {
	case <-out.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the job's first line never showed")
	}
	stopFollowing()
	if err := <-followed; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("following the logs ended with %v, want nothing but the cancel", err)
	}
	ts.stop()
	ts.start(1)
	rec, code := ts.wait(id)
	if code != 0 || len(rec.Attempts) != 2 || rec.Attempts[0].Outcome != events.NodeLost {
		t.Fatalf("outcome %s after %d attempts, want succeeded in the second after node_lost", rec.Outcome, len(rec.Attempts))
	}
	if o, _ := ts.logsOf(id, "--attempt", "1"); o != "attempt 1\n" {
		t.Errorf("the stopped attempt's stdout: %q", o)
	}
	if o, _ := ts.logsOf(id); o != "attempt 2\n" {
		t.Errorf("the last attempt's stdout: %q", o)
	}
	if l := rec.Attempts[0].Logs; l == nil || l.StdoutBytes != int64(len("attempt 1\n")) {
		t.Errorf("the stopped attempt's record says logs %+v", l)
	}
}
