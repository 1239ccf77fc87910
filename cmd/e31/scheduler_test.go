package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// TestJobsOfALostNodeAreHeldAgainElsewhere crashes the node a job runs on:
// its lease lapses, the attempt is recorded as lost with the node, the
// compute is released, and the job is held again on the other node.
func TestJobsOfALostNodeAreHeldAgainElsewhere(t *testing.T) {
	t.Parallel()
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 2, leaseTTL: time.Second})
	// The first attempt would run for a minute; the next one finishes at once.
	id := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "if [ \"$E31_ATTEMPT\" = 1 ]; then sleep 60; fi; echo attempt $E31_ATTEMPT > $E31_OUTPUT/ok.txt"]}
request: {cpu: 2, memory: 64MiB, limit: 2m}
output: [ok.txt]
`, nil))
	ts.waitState(id, hold.StateRunning)
	rec, err := ts.c.Record(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	lost := rec.Node
	ts.sys.Crash(lost)

	rec, code := ts.wait(id)
	if code != 0 || rec.Outcome != events.Succeeded {
		t.Fatalf("outcome %s (%s), want succeeded on the second attempt", rec.Outcome, rec.Reason)
	}
	if len(rec.Attempts) != 2 {
		t.Fatalf("%d attempts, want 2: %+v", len(rec.Attempts), rec.Attempts)
	}
	first, second := rec.Attempts[0], rec.Attempts[1]
	if first.Node != lost || first.Outcome != events.NodeLost || !strings.Contains(first.Reason, "lease") || first.ReleasedAt == nil {
		t.Errorf("first attempt = %+v, want node_lost on %s, released, with the reason", first, lost)
	}
	if second.Node == lost {
		t.Errorf("held again on the lost node %s", lost)
	}
	kinds := strings.Join(ts.kinds(id), ",")
	if !strings.Contains(kinds, "HoldLost,ComputeReleased,ComputeHeld") {
		t.Errorf("events %s: want the lost attempt released before the job is held again", kinds)
	}
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 {
		t.Errorf("audit after a lost node:\n%s", out)
	}
}

// TestAnotherSchedulerTakesOver runs two RENT instances, crashes the one
// that decides, and checks that the other holds the jobs submitted after
// it, with no node ever held beyond its capacity.
func TestAnotherSchedulerTakesOver(t *testing.T) {
	t.Parallel()
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 1, rentInstances: 2, leaseTTL: time.Second})
	job := writeJob(t, `
work: {command: ["/bin/sh", "-c", "sleep 0.2"]}
request: {cpu: 1, memory: 32MiB, limit: 1m}
`, nil)
	before := ts.submit(job)
	ts.wait(before)

	kv, err := ts.c.JetStream().KeyValue(context.Background(), events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(context.Background(), "leader.rent")
	if err != nil {
		t.Fatalf("no scheduler holds the leader lease: %v", err)
	}
	leader := string(entry.Value())
	ts.sys.Crash(leader)

	var ids []string
	for range 6 {
		ids = append(ids, ts.submit(job))
	}
	for _, id := range ids {
		if rec, code := ts.wait(id); code != 0 {
			t.Errorf("job %s after the leader %s crashed: %s (%s)", id, leader, rec.Outcome, rec.Reason)
		}
	}
	entry, err = kv.Get(context.Background(), "leader.rent")
	if err != nil || string(entry.Value()) == leader {
		t.Errorf("leader after the crash: %v %v, want the other instance", entry, err)
	}
	// The audit checks, among the rest, that the node was never held
	// beyond its 2 cpu at any instant.
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 {
		t.Errorf("audit after the failover:\n%s", out)
	}
}

func TestSweepRunsOneJobPerValue(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	job := writeJob(t, `
name: sweep
work: {command: ["/bin/sh", "-c", "cat $E31_DATA/in/base.txt > $E31_OUTPUT/r.txt; echo $E31_SWEEP_INDEX $E31_SWEEP_VALUE >> $E31_OUTPUT/r.txt"]}
data: [{name: in, path: ./in}]
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
output: [r.txt]
sweep: {values: [0.1, 0.5, "high"]}
`, map[string]string{"in/base.txt": "base\n"})
	out, errOut, code := ts.cli("submit", "--quiet", "--json", "--wait", job)
	if code != 0 {
		t.Fatalf("e31 submit --wait of a sweep: exit %d: %s %s", code, out, errOut)
	}
	var sum client.SweepSummary
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Jobs != 3 || sum.Outcomes["succeeded"] != 3 {
		t.Fatalf("sweep summary %+v, want 3 jobs succeeded", sum)
	}
	var got []string
	for _, r := range sum.Records {
		dir := t.TempDir()
		if _, errOut, code := ts.cli("output", r.Job, "-o", dir, "--quiet"); code != 0 {
			t.Fatal(errOut)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "r.txt"))
		got = append(got, strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "|"))
	}
	sort.Strings(got)
	want := []string{"base|0 0.1", "base|1 0.5", "base|2 high"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("outputs %v, want %v (staged data shared, E31_SWEEP_INDEX and _VALUE set)", got, want)
	}
	// The sweep as a whole, by its id.
	st, _, code := ts.cli("status", sum.Sweep)
	if code != 0 || !strings.Contains(st, "3 jobs") || !strings.Contains(st, "3 succeeded") {
		t.Errorf("e31 status of the sweep = %q", st)
	}
}

func TestJobsWaitForTheJobsTheyRunAfter(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	first := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "sleep 0.5; echo model > $E31_OUTPUT/model.txt"]}
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
output: [model.txt]
`, nil))
	failing := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "exit 4"]}
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
`, nil))
	// Uses the first job's output before that job has finished.
	second := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "cp $E31_DATA/model/model.txt $E31_OUTPUT/used.txt"]}
data: [{name: model, from_job: `+first+`}]
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
output: [used.txt]
`, nil))
	doomed := ts.submit(writeJob(t, `
work: {command: ["/bin/true"]}
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
after: [`+failing+`]
`, nil))

	rec, code := ts.wait(second)
	if code != 0 {
		t.Fatalf("the dependent job: %s (%s)", rec.Outcome, rec.Reason)
	}
	firstRec, _ := ts.wait(first)
	if !rec.HeldAt.After(*firstRec.ReleasedAt) && !rec.HeldAt.Equal(*firstRec.ReleasedAt) {
		t.Errorf("held at %s, before the job it runs after was released at %s", rec.HeldAt, firstRec.ReleasedAt)
	}
	dir := t.TempDir()
	if _, errOut, code := ts.cli("output", second, "-o", dir, "--quiet"); code != 0 {
		t.Fatal(errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "used.txt")); strings.TrimSpace(string(b)) != "model" {
		t.Errorf("the dependent job read %q from the earlier job's output, want model", b)
	}
	rec, _ = ts.wait(doomed)
	if rec.Outcome != events.Rejected || !strings.Contains(rec.Reason, failing) || len(rec.Attempts) != 0 {
		t.Errorf("a job after a failed one: %s (%s), held %d times; want rejected naming %s, never held", rec.Outcome, rec.Reason, len(rec.Attempts), failing)
	}
}

func TestAJobNoNodeCanHoldIsRejectedAtOnce(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	big := writeJob(t, `
work: {command: ["/bin/true"]}
request: {cpu: 64, memory: 32MiB, limit: 1m}
`, nil)
	rec, _ := ts.wait(ts.submit(big))
	if rec.Outcome != events.Rejected || !strings.Contains(rec.Reason, "no node in the pool can ever hold it") || !strings.Contains(rec.Reason, "2 cpu") {
		t.Errorf("outcome %s (%s), want rejected, naming the largest node", rec.Outcome, rec.Reason)
	}
	out, errOut, code := ts.cli("submit", "--quiet", "--wait-for-node", big)
	if code != 0 {
		t.Fatal(errOut)
	}
	id := strings.TrimSpace(out)
	ts.waitState(id, hold.StateWaiting)
	st, _, _ := ts.cli("status", id)
	if !strings.Contains(st, "waiting") || !strings.Contains(st, "waits for one to join") {
		t.Errorf("status of a job waiting for a node = %q", st)
	}
}
