package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/services/run"
)

// sweepOf submits a sweep of n through the CLI and returns its id.
func (ts *testSystem) submitSweep(path string, n int) string {
	ts.t.Helper()
	out, errOut, code := ts.cli("submit", "--quiet", "--json", path)
	var r struct {
		ID   string
		Jobs []string
	}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.ID == "" || len(r.Jobs) != n {
		ts.t.Fatalf("e31 submit of a sweep of %d: exit %d: %s %s", n, code, out, errOut)
	}
	return r.ID
}

// jsonOf runs the CLI as alice and decodes what it prints into v; it
// returns the exit code.
func (ts *testSystem) jsonOf(v any, args ...string) int {
	ts.t.Helper()
	out, errOut, code := ts.cli(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		ts.t.Fatalf("e31 %s: exit %d, %v: %s %s", strings.Join(args, " "), code, err, out, errOut)
	}
	return code
}

// inodes maps every file under dir to its inode: a file fetched again is
// written beside and renamed into place, and so has another.
func inodes(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out[path] = info.Sys().(*syscall.Stat_t).Ino
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// objectReads counts the direct gets of alice's data bucket while it is
// set: what reading an object of her store takes (stage reads objects with
// direct gets only).
func (ts *testSystem) objectReads() *atomic.Int64 {
	ts.t.Helper()
	var n atomic.Int64
	sub, err := ts.c.Conn().Subscribe("$JS.API.DIRECT.GET.OBJ_"+events.DataBucketFor("alice")+".>", func(*nats.Msg) { n.Add(1) })
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := ts.c.Conn().Flush(); err != nil {
		ts.t.Fatal(err)
	}
	return &n
}

// TestASweepIsHandledAsOne: a sweep of 1,000 whose odd points fail. Its
// id collects the 500 results under DIR/<index>/ (and, run again, fetches
// nothing), shows the 500 failures' stderr, and takes the failed points
// submitted again with a fixed job file: they succeed into the same
// folder, and the sweep counts each point once.
func TestASweepIsHandledAsOne(t *testing.T) {
	t.Parallel()
	const n = 1000
	ts := startSystem(t, t.TempDir(), 2)
	job := `
name: odd-ones-fail
work:
  command: |
    if [ $((E31_SWEEP_INDEX %% 2)) = 1 ] && [ -z "$FIXED" ]; then echo "point $E31_SWEEP_INDEX: odd, so it fails" >&2; exit 3; fi
    echo "$E31_SWEEP_INDEX $E31_SWEEP_VALUE" > $E31_OUTPUT/r.txt
  env: {FIXED: "%s"}
request: {cpu: 0.1, memory: 16MiB, limit: 1m}
output: [r.txt]
sweep: {count: %d}
`
	start := time.Now()
	sweep := ts.submitSweep(writeJob(t, fmt.Sprintf(job, "", n), nil), n)
	var sum client.SweepSummary
	if code := ts.jsonOf(&sum, "wait", "--json", "--timeout", "5m", sweep); code != exitFailed ||
		sum.Jobs != n || sum.Outcomes["succeeded"] != n/2 || sum.Outcomes["failed"] != n/2 {
		t.Fatalf("e31 wait of the sweep: exit %d, %d jobs, outcomes %v; want 1, %d, half failed", code, sum.Jobs, sum.Outcomes, n)
	}
	t.Logf("a sweep of %d ran in %s", n, time.Since(start).Round(time.Millisecond))

	// Its output: the 500 that succeeded, each under its index.
	dir := filepath.Join(t.TempDir(), "out")
	reads := ts.objectReads()
	start = time.Now()
	var out client.SweepOutput
	if code := ts.jsonOf(&out, "output", "--json", "-o", dir, sweep); code != exitFailed ||
		out.Written != n/2 || out.FilesFetched != n/2 || out.FilesKept != 0 || len(out.Without) != n/2 {
		t.Fatalf("e31 output of the sweep: exit %d, %+v; want 500 written and fetched, 500 without", code, out)
	}
	t.Logf("its output: %d points, %d files in %s, %d object reads", out.Written, out.FilesFetched, time.Since(start).Round(time.Millisecond), reads.Load())
	for i := range n {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i), "r.txt"))
		switch {
		case i%2 == 0 && (err != nil || string(b) != fmt.Sprintf("%d %d\n", i, i)):
			t.Fatalf("%d/r.txt = %q, %v", i, b, err)
		case i%2 == 1 && err == nil:
			t.Fatalf("%d/r.txt was written for a point that failed", i)
		}
	}
	for _, w := range out.Without {
		if w.Index%2 != 1 || w.Outcome != events.Failed {
			t.Fatalf("without output: %+v; want only odd points, failed", w)
		}
	}
	if reads.Load() == 0 {
		t.Fatal("no object read was seen while the output was fetched: the count would prove nothing")
	}

	// Again: nothing is fetched, nothing is rewritten.
	before := inodes(t, dir)
	reads.Store(0)
	start = time.Now()
	if code := ts.jsonOf(&out, "output", "--json", "-o", dir, sweep); code != exitFailed ||
		out.Written != n/2 || out.FilesFetched != 0 || out.FilesKept != n/2 {
		t.Fatalf("e31 output again: exit %d, %+v; want nothing fetched, 500 kept", code, out)
	}
	t.Logf("its output again: nothing fetched, in %s", time.Since(start).Round(time.Millisecond))
	if r := reads.Load(); r != 0 {
		t.Errorf("the second e31 output read %d objects, want none", r)
	}
	after := inodes(t, dir)
	for path, ino := range before {
		if after[path] != ino {
			t.Fatalf("%s was written again", path)
		}
	}

	// The failures' stderr, each headed by its index and job.
	var tails []client.PointTail
	start = time.Now()
	if code := ts.jsonOf(&tails, "logs", "--failed", "--json", sweep); code != 0 || len(tails) != n/2 {
		t.Fatalf("e31 logs --failed: exit %d, %d tails; want 500", code, len(tails))
	}
	t.Logf("its failures' stderr: %d tails in %s", len(tails), time.Since(start).Round(time.Millisecond))
	for _, tail := range tails {
		want := fmt.Sprintf("point %d: odd, so it fails", tail.Index)
		if tail.Job != fmt.Sprintf("%s-%d", sweep, tail.Index) || len(tail.Stderr) != 1 || tail.Stderr[0] != want {
			t.Fatalf("tail %+v; want %q from %s-%d", tail, want, sweep, tail.Index)
		}
	}
	text, _, _ := ts.cli("logs", "--failed", sweep)
	if !strings.Contains(text, fmt.Sprintf("== [999] %s-999: failed: exited with code 3\npoint 999: odd, so it fails\n", sweep)) {
		t.Errorf("e31 logs --failed does not head point 999's stderr with its index and job:\n%.300s", text)
	}

	// The failed points, submitted again with the fix, join the sweep.
	var again client.Again
	fix := writeJob(t, fmt.Sprintf(job, "yes", n), nil)
	start = time.Now()
	if code := ts.jsonOf(&again, "submit", "--again", sweep, "--failed", "--json", fix); code != 0 || len(again.Jobs) != n/2 || again.Round != 1 {
		t.Fatalf("e31 submit --again: exit %d, %+v; want 500 jobs of round 1", code, again)
	}
	if code := ts.jsonOf(&sum, "wait", "--json", "--timeout", "5m", sweep); code != 0 ||
		sum.Jobs != n || sum.Outcomes["succeeded"] != n || sum.Replaced != n/2 {
		t.Fatalf("e31 wait after --again: exit %d, %d jobs, outcomes %v, %d replaced; want 0, every point succeeded", code, sum.Jobs, sum.Outcomes, sum.Replaced)
	}
	t.Logf("its %d failures submitted again and run in %s", len(again.Jobs), time.Since(start).Round(time.Millisecond))
	if code := ts.jsonOf(&out, "output", "--json", "-o", dir, sweep); code != 0 ||
		out.Written != n || out.FilesFetched != n/2 || out.FilesKept != n/2 || len(out.Without) != 0 {
		t.Fatalf("e31 output after --again: exit %d, %+v; want the 500 new fetched beside the 500 kept", code, out)
	}
	for i := 1; i < n; i += 2 {
		if b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i), "r.txt")); err != nil || string(b) != fmt.Sprintf("%d %d\n", i, i) {
			t.Fatalf("%d/r.txt after --again = %q, %v", i, b, err)
		}
	}
	// Nothing is left to submit again.
	if code := ts.jsonOf(&again, "submit", "--again", sweep, "--failed", "--json"); code != 0 || len(again.Jobs) != 0 {
		t.Fatalf("e31 submit --again of a sweep that succeeded: exit %d, %+v; want nothing submitted", code, again)
	}
	start = time.Now()
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 {
		t.Fatalf("audit:\n%s", out)
	}
	t.Logf("the audit of it all in %s", time.Since(start).Round(time.Millisecond))
}

// TestCancellingASweepStopsEveryJob: a sweep of 1,000 jobs that would run
// for ten minutes, some running and the rest waiting, is cancelled with
// one command: within seconds no job of it runs or waits, every one
// cancelled, and the audit passes.
func TestCancellingASweepStopsEveryJob(t *testing.T) {
	t.Parallel()
	const n = 1000
	ts := startSystem(t, t.TempDir(), 2)
	sweep := ts.submitSweep(writeJob(t, fmt.Sprintf(`
name: too-long
work: {command: ["/bin/sh", "-c", "sleep 600"]}
request: {cpu: 0.1, memory: 16MiB, limit: 20m}
sweep: {count: %d}
`, n), nil), n)
	// The first point runs, the last waits: the cancel finds both kinds.
	ts.waitState(sweep+"-0", hold.StateRunning)
	ts.waitState(fmt.Sprintf("%s-%d", sweep, n-1), hold.StateWaiting)

	start := time.Now()
	if out, errOut, code := ts.cli("cancel", sweep, "--reason", "gone wrong"); code != 0 || !strings.Contains(out, "cancel of sweep "+sweep+" requested") {
		t.Fatalf("e31 cancel of the sweep: exit %d: %s %s", code, out, errOut)
	}
	// Asked again at once: the server takes it for a repeat (the same
	// id), and it is stored again, changing nothing.
	if out, errOut, code := ts.cli("cancel", sweep); code != 0 {
		t.Fatalf("e31 cancel of the sweep, again: exit %d: %s %s", code, out, errOut)
	}
	var sum client.SweepSummary
	code := ts.jsonOf(&sum, "wait", "--json", "--timeout", "30s", sweep)
	took := time.Since(start)
	if code != exitFailed || sum.Jobs != n || sum.Outcomes["cancelled"] != n {
		t.Fatalf("e31 wait after the cancel: exit %d, %d jobs, states %v, outcomes %v; want every one cancelled", code, sum.Jobs, sum.States, sum.Outcomes)
	}
	t.Logf("a sweep of %d cancelled: every job over %s after e31 cancel", n, took.Round(time.Millisecond))
	held := 0
	for _, r := range sum.Records {
		if len(r.Attempts) > 0 {
			held++
		}
	}
	if held == 0 || held == n {
		t.Errorf("%d of %d jobs were held before the cancel: want some running and some waiting", held, n)
	}
	// Once over, a cancel asks nothing.
	if out, _, code := ts.cli("cancel", sweep); code != 0 || !strings.Contains(out, "already over") {
		t.Errorf("e31 cancel of a sweep that is over: exit %d: %s", code, out)
	}
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 {
		t.Fatalf("audit:\n%s", out)
	}
}

// TestAnotherTenantCannotCancelASweep: bob, with nothing but a plain NATS
// client and his own credentials, publishes the cancel of alice's sweep on
// his own tail, which the server takes and every step ignores, and tries
// it on hers, which the server refuses. Her sweep succeeds; her own cancel
// of a later sweep, asked the moment it is submitted, stops it whole.
func TestAnotherTenantCannotCancelASweep(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	sweep := ts.submitSweep(writeJob(t, `
work: {command: ["/bin/sh", "-c", "sleep 2"]}
request: {cpu: 0.5, memory: 16MiB, limit: 1m}
sweep: {count: 8}
`, nil), 8)
	ts.waitState(sweep+"-0", hold.StateRunning)
	for _, tail := range []string{"bob", "alice"} {
		err := ts.bobCancels(sweep, tail)
		switch {
		case tail == "bob" && err != nil:
			t.Fatalf("bob's cancel on his own tail: %v", err)
		case tail == "alice" && err == nil:
			t.Fatal("the server took bob's cancel on alice's tail")
		}
	}
	var sum client.SweepSummary
	if code := ts.jsonOf(&sum, "wait", "--json", "--timeout", "1m", sweep); code != 0 || sum.Outcomes["succeeded"] != 8 {
		t.Fatalf("alice's sweep after bob's cancels: exit %d, outcomes %v; want every job succeeded", code, sum.Outcomes)
	}
	// Bob's e31 knows no such sweep.
	if _, errOut, code := ts.cliAs("bob", "cancel", sweep); code == 0 || !strings.Contains(errOut, "no such job") {
		t.Errorf("bob's e31 cancel of alice's sweep: exit %d: %s", code, errOut)
	}

	// Alice's cancel of a sweep whose submission SUBMIT is still taking
	// in, asked at once, stops every job of it, those accepted after the
	// cancel too; bob's cancel, stored first under the id hers has (its
	// Nats-Msg-Id), does not keep hers out of the log.
	const n = 300
	later := ts.submitSweep(writeJob(t, fmt.Sprintf(`
work: {command: ["/bin/sh", "-c", "sleep 600"]}
request: {cpu: 0.1, memory: 16MiB, limit: 20m}
sweep: {count: %d}
`, n), nil), n)
	if err := ts.bobCancels(later, "bob"); err != nil {
		t.Fatalf("bob's cancel on his own tail: %v", err)
	}
	if out, errOut, code := ts.cli("cancel", later); code != 0 {
		t.Fatalf("e31 cancel of the sweep just submitted: exit %d: %s %s", code, out, errOut)
	}
	if code := ts.jsonOf(&sum, "wait", "--json", "--timeout", "30s", later); code != exitFailed || sum.Outcomes["cancelled"] != n {
		t.Fatalf("the sweep cancelled at once: exit %d, states %v, outcomes %v; want every job cancelled", code, sum.States, sum.Outcomes)
	}
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 {
		t.Fatalf("audit:\n%s", out)
	}
}

// TestSubmittingASweepAgainAsItWas: the failed points submitted again
// without a job file run as they were submitted; they fail again while
// what they need is missing, and succeed, in a later round, once it is
// there. Each point counts once, as its latest job.
func TestSubmittingASweepAgainAsItWas(t *testing.T) {
	t.Parallel()
	// The process executor: the jobs see the test's files.
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 1, node: run.Config{ExecutorKind: run.ExecProcess}})
	mark := filepath.Join(t.TempDir(), "ready")
	sweep := ts.submitSweep(writeJob(t, fmt.Sprintf(`
work:
  command: |
    if [ $((E31_SWEEP_INDEX %% 2)) = 1 ] && [ ! -e %q ]; then echo "not ready" >&2; exit 1; fi
    echo $E31_SWEEP_INDEX > $E31_OUTPUT/r.txt
request: {cpu: 0.1, memory: 16MiB, limit: 1m}
output: [r.txt]
sweep: {values: [a, b, c, d, e, f]}
`, mark), nil), 6)
	var sum client.SweepSummary
	if code := ts.jsonOf(&sum, "wait", "--json", "--timeout", "1m", sweep); code != exitFailed || sum.Outcomes["failed"] != 3 {
		t.Fatalf("first run: exit %d, outcomes %v; want the three odd points failed", code, sum.Outcomes)
	}
	for round := 1; round <= 2; round++ {
		if round == 2 {
			if err := os.WriteFile(mark, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var again client.Again
		if code := ts.jsonOf(&again, "submit", "--again", sweep, "--failed", "--json"); code != 0 || again.Round != round || len(again.Jobs) != 3 {
			t.Fatalf("round %d: exit %d, %+v; want the three odd points", round, code, again)
		}
		for _, id := range again.Jobs {
			if !strings.HasSuffix(id, fmt.Sprintf("-a%d", round)) {
				t.Errorf("round %d submitted %s", round, id)
			}
		}
		code := ts.jsonOf(&sum, "wait", "--json", "--timeout", "1m", sweep)
		want := map[int]int{1: exitFailed, 2: 0}[round]
		if code != want || sum.Jobs != 6 || sum.Replaced != 3*round {
			t.Fatalf("round %d: exit %d, %d jobs, %d replaced, outcomes %v", round, code, sum.Jobs, sum.Replaced, sum.Outcomes)
		}
	}
	for _, r := range sum.Records {
		wantRound := map[bool]int{true: 0, false: 2}[r.Sweep.Index%2 == 0]
		if r.Sweep.Again != wantRound || r.Sweep.Value != string(rune('a'+r.Sweep.Index)) ||
			(wantRound == 2 && r.Sweep.AgainOf != fmt.Sprintf("%s-%d-a1", sweep, r.Sweep.Index)) {
			t.Errorf("point %d counts as %s, %+v", r.Sweep.Index, r.Job, r.Sweep)
		}
	}
	dir := t.TempDir()
	var out client.SweepOutput
	if code := ts.jsonOf(&out, "output", "--json", "-o", dir, sweep); code != 0 || out.Written != 6 {
		t.Fatalf("e31 output: exit %d, %+v", code, out)
	}
}

// bobCancels publishes, as bob with nothing but a plain nats.go client, the
// cancel of sweep by tail (bob's own, or another's name), with the id and
// Nats-Msg-Id a sweep's cancel of round 0 has; it returns what the server
// said.
func (ts *testSystem) bobCancels(sweep, tail string) error {
	ts.t.Helper()
	env := events.New(sweep, &events.CancelRequested{By: tail, Sweep: true}, "urn:bob", time.Now())
	m, err := env.Msg()
	if err != nil {
		ts.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = ts.client("bob").JetStream().PublishMsg(ctx, m)
	return err
}
