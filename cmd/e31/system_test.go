package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/stack"
)

// testSystem is `e31 dev` started in-process for one test, with
// authentication on, as users get it: the CLI runs as alice (a submitter)
// unless a test says otherwise, and c is the operator's connection, for
// what tests do behind the CLI's back.
type testSystem struct {
	t    *testing.T
	opts devOptions
	dir  string
	url  string
	sys  *stack.Stack
	c    *client.Client
}

// testUsers are the submitters every test system has credentials for.
var testUsers = []string{"alice", "bob"}

// testExecutor is the executor integration tests run jobs with: the default
// one (the sandbox where the machine allows it), so that the suite tests
// what users get.
var testExecutor = "auto"

func startSystem(t *testing.T, dir string, nodes int) *testSystem {
	t.Helper()
	return startSystemWith(t, dir, devOptions{nodes: nodes})
}

// startSystemWith starts e31 dev with o's nodes, rent instances and lease
// time; the rest is the tests' usual.
func startSystemWith(t *testing.T, dir string, o devOptions) *testSystem {
	t.Helper()
	ts := &testSystem{t: t, dir: dir, opts: o}
	ts.start(o.nodes)
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testSystem) start(nodes int) {
	t := ts.t
	t.Helper()
	a := &app{out: io.Discard, errOut: io.Discard}
	a.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx := context.Background()
	sys, err := startDev(ctx, a, devOptions{dir: ts.dir, listen: "127.0.0.1:0", nodes: nodes, sync: "interval",
		node: run.Config{CPU: 2, MemoryBytes: 2 * jobfile.GiB, DiskBytes: 4 * jobfile.GiB, LogCap: ts.opts.node.LogCap,
			ExecutorKind: cmp.Or(ts.opts.node.ExecutorKind, testExecutor), Grace: 500 * time.Millisecond,
			GPURoot: ts.opts.node.GPURoot, GPUs: ts.opts.node.GPUs},
		rentInstances: ts.opts.rentInstances, leaseTTL: ts.opts.leaseTTL, users: testUsers, http: ts.opts.http})
	if err != nil {
		t.Fatalf("start e31 dev: %v", err)
	}
	ts.sys = sys
	ts.url = sys.Broker().ClientURL()
	ts.c = ts.client(events.Operator)
}

// client connects as one of the identities e31 dev wrote credentials for
// (operator, auditor, alice, bob); the connection closes with the system.
func (ts *testSystem) client(name string) *client.Client {
	ts.t.Helper()
	a := &app{out: io.Discard, errOut: io.Discard, natsURL: ts.url, creds: ts.creds(name)}
	a.log = slog.New(slog.NewTextHandler(testWriter{ts.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := a.dial(context.Background())
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(c.Close)
	return c
}

// creds is the credentials file e31 dev wrote for name.
func (ts *testSystem) creds(name string) string { return ts.sys.CredsFile(name) }

func (ts *testSystem) stop() {
	if ts.sys == nil {
		return
	}
	ts.c.Close()
	if err := ts.sys.Stop(); err != nil {
		ts.t.Errorf("stop e31 dev: %v", err)
	}
	ts.sys = nil
}

// testWriter sends logs to the test's log, so they show only on failure.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	defer func() {
		// The test is over, and a goroutine of a node it crashed on
		// purpose is still on its way out (a handler that the crash cut
		// off mid-way): testing refuses logs after the end, so this one
		// goes to stderr rather than bring the whole package down.
		if recover() != nil {
			_, _ = os.Stderr.Write(b)
		}
	}()
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// cli runs the e31 command line against the system as alice, a
// submitter, as a user would.
func (ts *testSystem) cli(args ...string) (stdout, stderr string, code int) {
	return ts.cliAs("alice", args...)
}

// cliAs runs the e31 command line as name: alice, bob, auditor or operator.
func (ts *testSystem) cliAs(name string, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = execute(append(args, "--nats", ts.url, "--creds", ts.creds(name), "--log-level", "warn"), &out, &errOut)
	return out.String(), errOut.String(), code
}

// writeJob writes a job file (and any extra files) into a fresh folder.
func writeJob(t *testing.T, yaml string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// submit submits a job file through the CLI and returns its id.
func (ts *testSystem) submit(path string) string {
	ts.t.Helper()
	out, errOut, code := ts.cli("submit", "--quiet", "--json", path)
	if code != 0 {
		ts.t.Fatalf("e31 submit: exit %d: %s", code, errOut)
	}
	var r struct{ ID string }
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.ID == "" {
		ts.t.Fatalf("e31 submit --json printed %q", out)
	}
	return r.ID
}

// wait waits for one of alice's jobs through the CLI and returns its
// record and exit code.
func (ts *testSystem) wait(id string) (*hold.HoldRecord, int) {
	ts.t.Helper()
	return ts.waitAs("alice", id)
}

// waitAs waits for a job through the CLI as name.
func (ts *testSystem) waitAs(name, id string) (*hold.HoldRecord, int) {
	ts.t.Helper()
	out, errOut, code := ts.cliAs(name, "wait", "--json", "--timeout", "3m", id)
	var rec hold.HoldRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		ev, _, _ := ts.cliAs(events.Operator, "events", id)
		ts.t.Fatalf("e31 wait %s: exit %d, %v: %s %s\nits events:\n%s", id, code, err, out, errOut, ev)
	}
	return &rec, code
}

// kinds lists the event types of a job's log.
func (ts *testSystem) kinds(id string) []string {
	ts.t.Helper()
	evs, err := bus.ReadJob(context.Background(), ts.c.JetStream(), id, 1)
	if err != nil {
		ts.t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, events.Name(e.Type))
	}
	return out
}

func TestJobSucceedsAndItsOutputComesBackByteForByte(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	input := strings.Repeat("e31 returns what the job wrote, byte for byte.\n", 5000) + "\x00\x01\xff"
	job := writeJob(t, `
name: copy
work:
  command: ["/bin/sh", "-c", "cp $E31_DATA/in/input.bin $E31_OUTPUT/copy.bin && mkdir -p $E31_OUTPUT/sub && echo $E31_JOB_ID > $E31_OUTPUT/sub/id.txt"]
data:
  - name: in
    path: ./in
request:
  cpu: 0.5
  memory: 128MiB
  limit: 1m
output:
  - copy.bin
  - sub/*.txt
`, map[string]string{"in/input.bin": input})
	id := ts.submit(job)
	rec, code := ts.wait(id)
	if code != 0 || rec.Outcome != events.Succeeded {
		t.Fatalf("outcome %s (exit %d): %s", rec.Outcome, code, rec.Reason)
	}
	if rec.Output.Files != 2 || rec.Output.Partial || len(rec.Output.Missing) != 0 {
		t.Errorf("output = %+v, want 2 files, complete", rec.Output)
	}
	if rec.ReleasedAt == nil || rec.HeldAt == nil || rec.HeldSeconds <= 0 || rec.Node != "node-1" {
		t.Errorf("record does not show the hold: %+v", rec)
	}
	dir := t.TempDir()
	if _, errOut, code := ts.cli("output", id, "-o", dir, "--quiet"); code != 0 {
		t.Fatalf("e31 output: exit %d: %s", code, errOut)
	}
	got, err := os.ReadFile(filepath.Join(dir, "copy.bin"))
	if err != nil || string(got) != input {
		t.Errorf("returned copy.bin differs from the staged input (%d vs %d bytes, %v)", len(got), len(input), err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "sub", "id.txt")); strings.TrimSpace(string(got)) != id {
		t.Errorf("sub/id.txt = %q, want the job id (E31_JOB_ID)", got)
	}
}

func TestNonZeroExitIsFailedWithTheCode(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	id := ts.submit(writeJob(t, `
work:
  command: ["/bin/sh", "-c", "echo partial > $E31_OUTPUT/log.txt; exit 7"]
request: {cpu: 0.5, memory: 64MiB, limit: 1m}
output: [log.txt]
`, nil))
	rec, code := ts.wait(id)
	if code != exitFailed {
		t.Errorf("e31 wait exit = %d, want %d for a failed job", code, exitFailed)
	}
	if rec.Outcome != events.Failed || rec.ExitCode == nil || *rec.ExitCode != 7 {
		t.Fatalf("outcome %s exit %v, want failed with 7", rec.Outcome, rec.ExitCode)
	}
	if rec.Output.Files != 1 {
		t.Errorf("a failed job's output is returned too: got %d files", rec.Output.Files)
	}
	if rec.State != hold.StateReleased {
		t.Errorf("state %s, want released", rec.State)
	}
}

func TestJobPastItsLimitIsStoppedAndReleasedWithPartialOutput(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	id := ts.submit(writeJob(t, `
work:
  command: ["/bin/sh", "-c", "echo started > $E31_OUTPUT/progress.txt; trap '' TERM; sleep 30"]
request: {cpu: 0.5, memory: 64MiB, limit: 1s}
output: [progress.txt, final.txt]
`, nil))
	rec, code := ts.wait(id)
	if code != exitFailed || rec.Outcome != events.LimitExceeded {
		t.Fatalf("outcome %s (exit %d), want limit_exceeded", rec.Outcome, code)
	}
	if !rec.Output.Partial || rec.Output.Files != 1 || len(rec.Output.Missing) != 1 || rec.Output.Missing[0] != "final.txt" {
		t.Errorf("output = %+v, want progress.txt returned as partial and final.txt missing", rec.Output)
	}
	if rec.ReleasedAt == nil {
		t.Fatal("compute was not released")
	}
	// It ignored SIGTERM, so it ran until SIGKILL at its limit (counted
	// from the hold), not 30s.
	if ran := rec.StoppedAt.Sub(*rec.HeldAt); ran < time.Second || ran > 3*time.Second {
		t.Errorf("stopped %s after the hold, want about its 1s limit", ran)
	}
}

func TestInvalidJobIsRejectedWithTheReasonAndNeverHeld(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	ctx := context.Background()
	// An upstream system that submits as alice with a plain client.
	pub := bus.NewPublisher(ts.client("alice").JetStream(), "e31/test", nil)
	cases := map[string]events.JobSpec{
		// What a buggy upstream publisher might send: no limit, no command.
		"no-limit":   {Work: events.Work{Command: []string{"/bin/true"}}, Request: events.Request{CPU: 1, MemoryBytes: 1 << 20}},
		"no-command": {Request: events.Request{CPU: 1, MemoryBytes: 1 << 20, LimitSeconds: 10}},
		// Data that was never staged.
		"missing-data": {Work: events.Work{Command: []string{"/bin/true"}}, Request: events.Request{CPU: 1, MemoryBytes: 1 << 20, DiskBytes: 1 << 20, LimitSeconds: 10},
			Data: []events.DataRef{{Name: "x", Kind: "file", Digest: "sha256:" + strings.Repeat("ab", 32), Bytes: 3}}},
	}
	want := map[string]string{"no-limit": "request.limit", "no-command": "work.command", "missing-data": "data[0]"}
	for name, spec := range cases {
		id := "reject-" + name
		if _, err := pub.Append(ctx, id, &events.JobRequested{Submitter: "alice", Spec: spec}, bus.ExpectLast(0)); err != nil {
			t.Fatal(err)
		}
		rec, code := ts.wait(id)
		if code != exitFailed || rec.Outcome != events.Rejected || rec.State != hold.StateRejected {
			t.Errorf("%s: outcome %s state %s (exit %d), want rejected", name, rec.Outcome, rec.State, code)
		}
		if !strings.Contains(rec.Reason, want[name]) {
			t.Errorf("%s: reason %q does not name %s", name, rec.Reason, want[name])
		}
		if rec.Node != "" || rec.HeldSeconds != 0 || len(rec.Attempts) != 0 {
			t.Errorf("%s: a rejected job shows a hold: %+v", name, rec)
		}
		if k := ts.kinds(id); strings.Join(k, ",") != "JobRequested,JobRejected" {
			t.Errorf("%s: events %v, want JobRequested then JobRejected only", name, k)
		}
	}
	// And the CLI refuses a bad file before anything reaches the system.
	_, errOut, code := ts.cli("submit", writeJob(t, "work: {command: [x]}\nrequest: {cpu: -1}\n", nil))
	if code != exitUsage || !strings.Contains(errOut, "request.limit: required") || !strings.Contains(errOut, "request.cpu") {
		t.Errorf("e31 submit of a bad file: exit %d, %q", code, errOut)
	}
}

func TestCancelStopsARunningJobAndAWaitingOne(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	// The node has 2 cpu: the first job fills it, the second waits.
	running := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "echo so-far > $E31_OUTPUT/part.txt; sleep 60"]}
request: {cpu: 2, memory: 64MiB, limit: 2m}
output: [part.txt]
`, nil))
	waiting := ts.submit(writeJob(t, `
work: {command: ["/bin/true"]}
request: {cpu: 2, memory: 64MiB, limit: 2m}
`, nil))
	ts.waitState(running, hold.StateRunning)
	ts.waitState(waiting, hold.StateWaiting)
	out, _, _ := ts.cli("status", waiting)
	if !strings.Contains(out, "waiting") || !strings.Contains(out, "waiting for compute: it needs 2 cpu") {
		t.Errorf("status of the waiting job = %q, want waiting with a reason", out)
	}
	for _, id := range []string{waiting, running} {
		if _, errOut, code := ts.cli("cancel", id); code != 0 {
			t.Fatalf("e31 cancel %s: exit %d %s", id, code, errOut)
		}
	}
	rec, _ := ts.wait(waiting)
	if rec.Outcome != events.Cancelled || len(rec.Attempts) != 0 {
		t.Errorf("waiting job: outcome %s, attempts %d; want cancelled, never held", rec.Outcome, len(rec.Attempts))
	}
	rec, _ = ts.wait(running)
	// Whether the job wrote part.txt before the cancel reached it is a race;
	// that output so far comes back is shown by the limit test.
	if rec.Outcome != events.Cancelled || rec.ReleasedAt == nil || !rec.Output.Partial {
		t.Errorf("running job: %+v; want cancelled, released, output marked partial", rec)
	}
}

// waitState waits until a job reaches state (running, or waiting: accepted).
func (ts *testSystem) waitState(id, state string) {
	ts.t.Helper()
	ceType := map[string]string{hold.StateRunning: events.TypeRunStarted, hold.StateWaiting: events.TypeJobSubmitted}[state]
	ts.waitEvent(id, ceType)
}

// waitEvent waits until an event of type ceType is in a job's log.
func (ts *testSystem) waitEvent(id, ceType string) {
	ts.t.Helper()
	err := ts.c.Follow(ctxTimeout(ts.t, 2*time.Minute), events.JobSubject(id), func(env events.Envelope) bool {
		return env.Type != ceType
	})
	if err != nil {
		ts.t.Fatalf("job %s never logged %s: %v\n%s", id, events.Name(ceType), err, ts.report(id))
	}
}

// report is what a failure about a job says of it: its events, and where
// e31 status says it is and why it waits. A job that never started said
// nothing more before (a sweep's first point, once in CI).
func (ts *testSystem) report(id string) string {
	evs, evErr, _ := ts.cliAs("operator", "events", id)
	status, stErr, _ := ts.cli("status", id)
	return fmt.Sprintf("its events:\n%s%s\ne31 status (alice):\n%s%s", evs, evErr, status, stErr)
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestAuditPassesAfterAMixedRun(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 2)
	var ids []string
	for _, cmd := range []string{"true", "exit 3", "sleep 5", "echo x > $E31_OUTPUT/x", "true"} {
		limit := "1m"
		if strings.HasPrefix(cmd, "sleep") {
			limit = "1s"
		}
		ids = append(ids, ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "`+cmd+`"]}
request: {cpu: 0.5, memory: 32MiB, limit: `+limit+`}
output: [{path: x, required: false}]
`, nil)))
	}
	pub := bus.NewPublisher(ts.client("bob").JetStream(), "e31/test", nil)
	if _, err := pub.Append(context.Background(), "rejected-one", &events.JobRequested{Submitter: "bob"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		ts.wait(id)
	}
	ts.waitAs("bob", "rejected-one")
	ids = append(ids, "rejected-one")
	out, _, code := ts.cliAs("auditor", "audit")
	if code != 0 || !strings.Contains(out, "audit passed") {
		t.Fatalf("e31 audit: exit %d\n%s", code, out)
	}
	// What `e31 audit` shows on a terminal as it goes: the log's messages
	// read, then the ledger's records compared that the reading did not
	// settle, each once.
	var p phases
	rep, err := ts.client("auditor").AuditShowing(context.Background(), nil, &p)
	if err != nil || !rep.OK() {
		t.Fatalf("audit showing its progress: %v %v", err, rep)
	}
	if want := []string{"reading the log", "comparing with the ledger"}; !slices.Equal(p.labels, want) ||
		p.totals[0] < int64(rep.Events) || p.added[1] != p.totals[1] || p.totals[1] > int64(len(ids)) || p.done != 2 {
		t.Errorf("progress of an audit of %d events and %d jobs: %+v", rep.Events, len(ids), p)
	}
	// The records account for every job, and nothing is held any more.
	out, _, _ = ts.cliAs("auditor", "ledger", "--json")
	var recs []hold.HoldRecord
	if err := json.Unmarshal([]byte(out), &recs); err != nil || len(recs) != len(ids) {
		t.Fatalf("ledger has %d records (%v), want %d", len(recs), err, len(ids))
	}
	// An offline audit of an export reaches the same verdict.
	export, _, code := ts.cliAs("auditor", "events", "--json")
	if code != 0 {
		t.Fatal("e31 events --json failed")
	}
	file := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(file, []byte(export), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = execute3("audit", "--from", file)
	if code != 0 || !strings.Contains(out, "audit passed") {
		t.Fatalf("e31 audit --from: exit %d\n%s", code, out)
	}
}

// phases records the phases of a piece of work that tells its progress.
type phases struct {
	labels        []string
	totals, added []int64
	done          int
}

func (p *phases) Start(total int64, label string) {
	p.labels, p.totals, p.added = append(p.labels, label), append(p.totals, total), append(p.added, 0)
}
func (p *phases) Add(n int64) { p.added[len(p.added)-1] += n }
func (p *phases) Done()       { p.done++ }

// execute3 runs the CLI with no server at all.
func execute3(args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := execute(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// TestRestartingMidRunLosesNoJob stops the whole system while jobs run and
// wait, starts it again on the same directory, and checks that every job
// ends, none is lost or run twice within an attempt, and the ledger audits.
func TestRestartingMidRunLosesNoJob(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := startSystem(t, dir, 1)
	var ids []string
	for i := 0; i < 12; i++ {
		ids = append(ids, ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "sleep 0.3; echo done > $E31_OUTPUT/done.txt"]}
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
output: [done.txt]
`, nil)))
	}
	ts.waitState(ids[0], hold.StateRunning)
	ts.stop()
	ts.start(1)
	lost := 0
	for _, id := range ids {
		rec, code := ts.wait(id)
		if code != 0 || rec.Outcome != events.Succeeded {
			t.Errorf("job %s: outcome %s (%s)", id, rec.Outcome, rec.Reason)
		}
		for _, a := range rec.Attempts[:len(rec.Attempts)-1] {
			if a.Outcome != events.NodeLost {
				t.Errorf("job %s: an earlier attempt ended %s; only a lost node may cause another", id, a.Outcome)
			}
			lost++
		}
		// No attempt starts twice. An attempt may never start: held on the
		// node as it shut down, it is given up when the node's lease lapses
		// (node_lost above) and the job is held again.
		evs, err := bus.ReadJob(context.Background(), ts.c.JetStream(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		starts := map[int]int{}
		for _, e := range evs {
			if s, ok := e.Event.(*events.RunStarted); ok {
				starts[s.Attempt]++
			}
		}
		for attempt, n := range starts {
			if n > 1 {
				t.Errorf("job %s: attempt %d started %d times", id, attempt, n)
			}
		}
		if last := len(rec.Attempts); starts[last] != 1 {
			t.Errorf("job %s: the attempt that succeeded (%d) started %d times", id, last, starts[last])
		}
	}
	if lost == 0 {
		t.Log("no job was running at the restart (nothing lost either way)")
	}
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 {
		t.Fatalf("audit after restart:\n%s", out)
	}
}

// TestAnUnreadableRequestIsRejectedWithTheProblem publishes what an
// upstream system might get wrong: a body e31 cannot decode. The job is
// rejected, naming the problem, and nothing after it is affected.
func TestAnUnreadableRequestIsRejectedWithTheProblem(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	ctx := context.Background()
	// Alice's own upstream system, with her credentials: whose the job is
	// comes from the subject even when the body cannot be read.
	good := events.New("garbled", &events.JobRequested{Submitter: "alice"}, "test", time.Now())
	m, err := good.Msg()
	if err != nil {
		t.Fatal(err)
	}
	m.Data = []byte(`{"submitter":"alice","spec":{"work":{"command":["/bin/true"]},"colour":"blue"}}`)
	if _, err := ts.client("alice").JetStream().PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	rec, code := ts.wait("garbled")
	if code != exitFailed || rec.Outcome != events.Rejected || !strings.Contains(rec.Reason, `unknown field "colour"`) {
		t.Errorf("outcome %s (%s), want rejected naming the unknown field", rec.Outcome, rec.Reason)
	}
	id := ts.submit(writeJob(t, "work: {command: [/bin/true]}\nrequest: {limit: 1m, cpu: 0.1}\n", nil))
	if rec, code := ts.wait(id); code != 0 {
		t.Errorf("a job after the garbage: %s (%s)", rec.Outcome, rec.Reason)
	}
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 {
		t.Errorf("audit after an unreadable request:\n%s", out)
	}
}

// TestOnlyTheSubmitterCanCancel: a cancel from someone else, published
// under that someone's own name (the only name the server lets bob use), is
// in the log and changes nothing.
func TestOnlyTheSubmitterCanCancel(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	id := ts.submit(writeJob(t, "work: {command: [/bin/sh, -c, sleep 1]}\nrequest: {limit: 1m, cpu: 0.1}\n", nil))
	ts.waitState(id, hold.StateRunning)
	pub := bus.NewPublisher(ts.client("bob").JetStream(), "e31/test", nil)
	if _, err := pub.Append(context.Background(), id, &events.CancelRequested{By: "bob"}); err != nil {
		t.Fatal(err)
	}
	rec, code := ts.wait(id)
	if code != 0 || rec.Outcome != events.Succeeded {
		t.Errorf("outcome %s (%s) after bob's cancel, want succeeded", rec.Outcome, rec.Reason)
	}
}

// TestEachSubmittersDataIsItsOwn: a job's output is stored in its
// submitter's bucket, and another submitter cannot use it as data nor wait
// for the job: for bob, alice's job does not exist.
func TestEachSubmittersDataIsItsOwn(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	ctx := context.Background()
	pub := bus.NewPublisher(ts.c.JetStream(), "e31/test", nil)
	spec := events.JobSpec{Work: events.Work{Command: []string{"/bin/sh", "-c", "echo secret > $E31_OUTPUT/s.txt"}},
		Request: events.Request{CPU: 0.1, MemoryBytes: 32 << 20, DiskBytes: 16 << 20, LimitSeconds: 60},
		Output:  []events.OutputDecl{{Path: "s.txt", Required: true}}}
	if _, err := pub.Append(ctx, "alices", &events.JobRequested{Submitter: "alice", Spec: spec}, bus.ExpectLast(0)); err != nil {
		t.Fatal(err)
	}
	if rec, code := ts.wait("alices"); code != 0 {
		t.Fatalf("alice's job: %s (%s)", rec.Outcome, rec.Reason)
	}
	obs, err := ts.c.JetStream().ObjectStore(ctx, events.DataBucketFor("alice"))
	if err != nil {
		t.Fatalf("alice's bucket: %v", err)
	}
	if infos, err := obs.List(ctx); err != nil || len(infos) == 0 {
		t.Errorf("alice's output is not in her bucket: %d objects, %v", len(infos), err)
	}
	uses := events.JobSpec{Work: events.Work{Command: []string{"/bin/cat", "/data/x/s.txt"}},
		Request: events.Request{CPU: 0.1, MemoryBytes: 32 << 20, DiskBytes: 16 << 20, LimitSeconds: 60},
		Data:    []events.DataRef{{Name: "x", FromJob: "alices"}}}
	waits := events.JobSpec{Work: events.Work{Command: []string{"/bin/true"}},
		Request: events.Request{CPU: 0.1, MemoryBytes: 32 << 20, DiskBytes: 16 << 20, LimitSeconds: 60},
		After:   []string{"alices"}}
	for id, s := range map[string]events.JobSpec{"bob-uses": uses, "bob-waits": waits} {
		if _, err := pub.Append(ctx, id, &events.JobRequested{Submitter: "bob", Spec: s}, bus.ExpectLast(0)); err != nil {
			t.Fatal(err)
		}
		rec, _ := ts.waitAs("bob", id)
		if rec.Outcome != events.Rejected || !strings.Contains(rec.Reason, "no such job alices") && !strings.Contains(rec.Reason, "alices: no such job") {
			t.Errorf("%s: %s (%s), want rejected: alice's job is not bob's to use", id, rec.Outcome, rec.Reason)
		}
	}
}
