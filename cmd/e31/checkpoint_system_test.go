package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
)

// stepsLoop is a job that works through 40 steps, a fifth of a second
// each, keeping its state in $E31_OUTPUT/ckpt with write-then-rename: the
// steps done, one line each, and where each attempt started. It starts
// from what ckpt holds (restored by RUN) or, given a folder, from a copy
// of it (staged with checkpoint_of), and returns the steps and the starts.
func stepsLoop(from string) string {
	return `set -e
C="$E31_OUTPUT/ckpt"
mkdir -p "$C"
` + from + `
[ -f "$C/state" ] || : > "$C/state"
{ cat "$C/starts" 2>/dev/null || true; echo "attempt $E31_ATTEMPT from [$E31_RESUMED_FROM] at $(wc -l < "$C/state")"; } > "$E31_OUTPUT/starts.tmp"
mv "$E31_OUTPUT/starts.tmp" "$C/starts"
while [ "$(wc -l < "$C/state")" -lt 40 ]; do
  i=$(( $(wc -l < "$C/state") + 1 ))
  sleep 0.2
  cp "$C/state" "$E31_OUTPUT/state.tmp"
  echo "step $i" >> "$E31_OUTPUT/state.tmp"
  mv "$E31_OUTPUT/state.tmp" "$C/state"
done
cp "$C/state" "$E31_OUTPUT/result"
`
}

// stepsJob is a job file of the steps loop.
func stepsJob(t *testing.T, limit, from, data string) string {
	t.Helper()
	script, err := json.Marshal(stepsLoop(from))
	if err != nil {
		t.Fatal(err)
	}
	return writeJob(t, fmt.Sprintf(`
work: {command: ["/bin/sh", "-c", %s]}
request: {cpu: 1, memory: 64MiB, disk: 64MiB, limit: %s}
checkpoint: {path: ckpt, every: 1s}
%s
output: [{path: result, required: false}, ckpt/starts]
`, script, limit, data), nil)
}

// checkSteps fetches a job's output and checks that its result holds each
// of the 40 steps once, in order, and returns where each attempt started.
func checkSteps(t *testing.T, ts *testSystem, id string) []string {
	t.Helper()
	dir := t.TempDir()
	if _, errOut, code := ts.cli("output", id, "-o", dir, "--quiet"); code != 0 {
		t.Fatalf("e31 output: %s", errOut)
	}
	got, err := os.ReadFile(filepath.Join(dir, "result"))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&want, "step %d\n", i)
	}
	if string(got) != want.String() {
		t.Errorf("the result does not hold every step once:\n%s", got)
	}
	starts, err := os.ReadFile(filepath.Join(dir, "ckpt", "starts"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(starts)), "\n")
}

// TestCheckpointResumesAfterTheNodeIsKilled crashes the node a 40-step
// loop runs on once it saved its checkpoint: the attempt is lost, the job
// is held again on the other node, which restores the last save, and the
// loop goes on from there, not from step 0. The lost attempt's held time
// is in its record but not in the bill, and the audit agrees.
func TestCheckpointResumesAfterTheNodeIsKilled(t *testing.T) {
	t.Parallel()
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 2, leaseTTL: time.Second})
	id := ts.submit(stepsJob(t, "3m", "", ""))
	ts.waitEvent(id, events.TypeCheckpointSaved)
	// A few more steps and saves, then the node dies as if SIGKILLed.
	ts.waitEvent(id, events.TypeCheckpointSaved)
	rec, err := ts.c.Record(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	lost := rec.Node
	ts.sys.Crash(lost)

	rec, code := ts.wait(id)
	if code != 0 || rec.Outcome != events.Succeeded || len(rec.Attempts) != 2 {
		t.Fatalf("outcome %s (%s) after %d attempts, want succeeded on the second", rec.Outcome, rec.Reason, len(rec.Attempts))
	}
	first, second := rec.Attempts[0], rec.Attempts[1]
	if first.Outcome != events.NodeLost || first.Checkpoints == nil || first.Checkpoints.Saves == 0 {
		t.Fatalf("first attempt %+v: want node_lost with saves", first)
	}
	if second.ResumedFrom != first.Checkpoints.Last {
		t.Errorf("second attempt resumed from %q, want the first's last save %s", second.ResumedFrom, first.Checkpoints.Last)
	}
	starts := checkSteps(t, ts, id)
	if len(starts) != 2 || !strings.HasPrefix(starts[1], "attempt 2 from ["+first.Checkpoints.Last+"] at ") || strings.HasSuffix(starts[1], " at 0") {
		t.Errorf("starts %q: want attempt 2 to resume from %s, not from step 0", starts, first.Checkpoints.Last)
	}

	// The bill: the lost attempt's time apart, the record whole.
	if rec.LostSeconds != first.HeldSeconds || rec.HeldSeconds != first.HeldSeconds+second.HeldSeconds {
		t.Errorf("record: held %v s, lost %v s; attempts %v and %v s", rec.HeldSeconds, rec.LostSeconds, first.HeldSeconds, second.HeldSeconds)
	}
	out, errOut, code := ts.cli("ledger", "--totals", "--json")
	if code != 0 {
		t.Fatalf("e31 ledger --totals: %s", errOut)
	}
	var totals []wire.Totals
	if err := json.Unmarshal([]byte(out), &totals); err != nil || len(totals) != 1 {
		t.Fatalf("e31 ledger --totals --json printed %s (%v)", out, err)
	}
	if got := totals[0]; got.Attempts != 1 || got.LostAttempts != 1 || !near(got.HeldSeconds, second.HeldSeconds) || !near(got.LostSeconds, first.HeldSeconds) {
		t.Errorf("totals %+v: want only attempt 2 (%v s) billed, attempt 1 (%v s) lost", got, second.HeldSeconds, first.HeldSeconds)
	}
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 {
		t.Errorf("audit after a resumed job:\n%s", out)
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

// TestAJobPastItsLimitIsContinuedWithItsCheckpoint runs the loop with a
// limit too short for it: it is stopped at the limit, its checkpoint saved
// as it stopped. A second job stages that checkpoint (checkpoint_of) and
// finishes the work: every step once.
func TestAJobPastItsLimitIsContinuedWithItsCheckpoint(t *testing.T) {
	t.Parallel()
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 1})
	first := ts.submit(stepsJob(t, "4s", "", ""))
	rec, _ := ts.wait(first)
	if rec.Outcome != events.LimitExceeded || len(rec.Attempts) != 1 || rec.Attempts[0].Checkpoints == nil {
		t.Fatalf("first job: %s (%s), saves %+v; want limit_exceeded with a checkpoint", rec.Outcome, rec.Reason, rec.Attempts)
	}
	cp := rec.Attempts[0].Checkpoints
	if evs := ts.kinds(first); !strings.Contains(strings.Join(evs, ","), "RunStopped") {
		t.Fatalf("events %v", evs)
	}

	second := ts.submit(stepsJob(t, "3m", `cp -R "$E31_DATA/prev/." "$C/"`,
		fmt.Sprintf("data: [{name: prev, checkpoint_of: %s}]", first)))
	rec, code := ts.wait(second)
	if code != 0 || rec.Outcome != events.Succeeded {
		t.Fatalf("second job: %s (%s)", rec.Outcome, rec.Reason)
	}
	starts := checkSteps(t, ts, second)
	if len(starts) != 2 || !strings.HasPrefix(starts[0], "attempt 1 from [] at 0") || strings.HasSuffix(starts[1], " at 0") {
		t.Errorf("starts %q: want the first job's start, then the second's from where it stopped", starts)
	}
	// The second job's record shows its input: the first's last save.
	if code := lastSaveStaged(t, ts, second, cp); code != "" {
		t.Error(code)
	}
}

// lastSaveStaged says what is wrong, if anything, with how a job staged
// the last save cp of the job it continues.
func lastSaveStaged(t *testing.T, ts *testSystem, id string, cp *hold.Checkpoints) string {
	t.Helper()
	out, _, code := ts.cliAs(events.Operator, "events", id, "--json")
	if code != 0 {
		return "e31 events failed"
	}
	if !strings.Contains(out, cp.Manifest) {
		return fmt.Sprintf("the second job's events do not name the first's last save %s", cp.Manifest)
	}
	return ""
}

// TestTheCheckpointExampleResumes runs examples/checkpoint, the training
// loop the guide shows, and kills its node once it saved: the second
// attempt starts from the epoch the save holds and the model comes back.
func TestTheCheckpointExampleResumes(t *testing.T) {
	t.Parallel()
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 2, leaseTTL: time.Second})
	id := ts.submit("../../examples/checkpoint/job.yaml")
	ts.waitEvent(id, events.TypeCheckpointSaved)
	rec, err := ts.c.Record(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	ts.sys.Crash(rec.Node)
	rec, code := ts.wait(id)
	if code != 0 || len(rec.Attempts) != 2 || rec.Attempts[1].ResumedFrom == "" {
		t.Fatalf("outcome %s (%s), attempts %+v: want success on a second attempt that resumed", rec.Outcome, rec.Reason, rec.Attempts)
	}
	out, _, _ := ts.cli("logs", id, "--attempt", "2")
	if !strings.Contains(out, "resumes from save "+rec.Attempts[1].ResumedFrom) || strings.Contains(out, "starting at epoch 0\n") {
		t.Errorf("attempt 2 wrote %q: want it to resume from %s, not from epoch 0", out, rec.Attempts[1].ResumedFrom)
	}
	dir := t.TempDir()
	if _, errOut, code := ts.cli("output", id, "-o", dir, "--quiet"); code != 0 {
		t.Fatalf("e31 output: %s", errOut)
	}
	var model struct{ W, B float64 }
	b, _ := os.ReadFile(filepath.Join(dir, "model.json"))
	if err := json.Unmarshal(b, &model); err != nil || model.W < 2.9 || model.W > 3.1 || model.B < 1.9 || model.B > 2.1 {
		t.Errorf("model %s (%v): want w near 3 and b near 2", b, err)
	}
}

// TestANodeToldToStopSavesItsJobsCheckpoint stops the node a 40-step loop
// runs on as SIGTERM stops it: the node stops the job, saves its
// checkpoint once more (trigger shutdown) and records the attempt lost;
// the next attempt resumes from that save, so at most the step under way
// is done again, and every step is in the result once.
func TestANodeToldToStopSavesItsJobsCheckpoint(t *testing.T) {
	t.Parallel()
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 2, leaseTTL: time.Second})
	id := ts.submit(stepsJob(t, "3m", "", ""))
	ts.waitEvent(id, events.TypeCheckpointSaved)
	rec, err := ts.c.Record(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	ts.sys.Halt(rec.Node)

	rec, code := ts.wait(id)
	// The node may be held the job again while it stops, and lose that
	// attempt unstarted as it goes: the attempt that ran to the end is the
	// last.
	n := len(rec.Attempts)
	if code != 0 || n < 2 {
		t.Fatalf("outcome %s (%s) after %d attempts, want success on a later attempt", rec.Outcome, rec.Reason, n)
	}
	first, second := rec.Attempts[0], rec.Attempts[n-1]
	if first.Outcome != events.NodeLost || first.Checkpoints == nil || second.ResumedFrom != first.Checkpoints.Last {
		t.Fatalf("first attempt %+v, last resumed from %q: want node_lost, the last resuming from its last save", first, second.ResumedFrom)
	}
	for _, a := range rec.Attempts[1 : n-1] {
		if a.Outcome != events.NodeLost || a.StartedAt != nil {
			t.Errorf("attempt %d between: %+v, want lost unstarted", a.Attempt, a)
		}
	}
	out, _, _ := ts.cliAs(events.Operator, "events", id, "--json")
	if !strings.Contains(out, `"trigger":"shutdown"`) {
		t.Errorf("no save with trigger shutdown among the job's events")
	}
	starts := checkSteps(t, ts, id)
	if len(starts) != 2 || strings.HasSuffix(starts[1], " at 0") {
		t.Errorf("starts %q: want the last attempt to resume where attempt 1 stopped", starts)
	}
	if !near(rec.HeldSeconds-rec.LostSeconds, second.HeldSeconds) {
		t.Errorf("billed %v s, want the last attempt's %v s", rec.HeldSeconds-rec.LostSeconds, second.HeldSeconds)
	}
}
