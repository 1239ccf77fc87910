package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/services/run"
)

// The tests in this file stage data in and output out through the whole
// system: the output bound, many output files, chaining jobs with
// from_job, and deleting what a job stored.

// TestOutputOverTheJobsDiskIsAClearFailure: a job may return no more than
// its declared request.disk. A job that leaves more fails with the reason,
// returns nothing, and its compute is released. The plain process executor
// does not bound the disk, so there RUN's bound is what stops it; the
// sandbox's /out has a quota of request.disk, which stops the write itself:
// the job fails at its bound, disk_exceeded, and what it wrote comes back,
// partial.
func TestOutputOverTheJobsDiskIsAClearFailure(t *testing.T) {
	t.Parallel()
	for _, executor := range []string{"process", testExecutor} {
		t.Run(executor, func(t *testing.T) {
			t.Parallel()
			ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 1, node: run.Config{ExecutorKind: executor}})
			id := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "head -c 3145728 /dev/zero > $E31_OUTPUT/big.bin"]}
request: {cpu: 0.5, memory: 64MiB, disk: 2MiB, limit: 1m}
output: [big.bin]
`, nil))
			rec, code := ts.wait(id)
			if executor != "process" {
				if code != exitFailed || rec.Outcome != events.DiskExceeded || rec.ReleasedAt == nil {
					t.Fatalf("outcome %s (%s, exit %d), released %v: want disk_exceeded and released", rec.Outcome, rec.Reason, code, rec.ReleasedAt)
				}
				if !strings.Contains(rec.Reason, "2097152-byte disk bound") {
					t.Errorf("reason %q does not name the bound", rec.Reason)
				}
				if !rec.Output.Partial || rec.Output.Files != 1 || rec.Output.Bytes == 0 || rec.Output.Bytes > 2<<20 {
					t.Errorf("output %+v, want what the job wrote, partial", rec.Output)
				}
				return
			}
			if code != exitFailed || rec.Outcome != events.Failed || rec.ReleasedAt == nil {
				t.Fatalf("outcome %s (exit %d), released %v: want failed and released", rec.Outcome, code, rec.ReleasedAt)
			}
			const want = "output is 3145728 bytes, over the job's bound of 2097152 (request.disk)"
			switch {
			case strings.Contains(rec.Reason, want):
				if rec.Output.Files != 0 || rec.Output.Bytes != 0 {
					t.Errorf("output %+v returned although it was over the bound", rec.Output)
				}
			case executor != "process" && rec.ExitCode != nil && *rec.ExitCode != 0:
				t.Logf("the executor bounded the disk itself: %s", rec.Reason)
			default:
				t.Errorf("reason %q (exit %v), want %q", rec.Reason, rec.ExitCode, want)
			}
		})
	}
}

// TestTenThousandOutputFilesComeBack: more files than an event lists come
// back whole, through the manifest, with the execute bit.
func TestTenThousandOutputFilesComeBack(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	const n = 10000
	id := ts.submit(writeJob(t, `
work:
  command:
    - /bin/sh
    - -c
    - |
      set -e
      mkdir -p $E31_OUTPUT/many
      i=0
      while [ $i -lt 10000 ]; do echo "file $i" > $E31_OUTPUT/many/f$i.txt; i=$((i+1)); done
      printf '#!/bin/sh\necho ran\n' > $E31_OUTPUT/many/run.sh
      chmod +x $E31_OUTPUT/many/run.sh
request: {cpu: 1, memory: 128MiB, limit: 5m}
output: [many]
`, nil))
	rec, code := ts.wait(id)
	if code != 0 {
		t.Fatalf("outcome %s: %s", rec.Outcome, rec.Reason)
	}
	if rec.Output.Files != n+1 || rec.Output.Manifest == "" || len(rec.Output.List) >= n {
		t.Fatalf("record output: %d files, manifest %q, %d listed; want %d files, a manifest, a bounded list",
			rec.Output.Files, rec.Output.Manifest, len(rec.Output.List), n+1)
	}
	dir := t.TempDir()
	if _, errOut, code := ts.cli("output", id, "-o", dir, "--quiet"); code != 0 {
		t.Fatalf("e31 output: exit %d: %s", code, errOut)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "many"))
	if err != nil || len(entries) != n+1 {
		t.Fatalf("wrote %d files (%v), want %d", len(entries), err, n+1)
	}
	for _, i := range []int{0, 4321, n - 1} {
		if b, err := os.ReadFile(filepath.Join(dir, "many", fmt.Sprintf("f%d.txt", i))); err != nil || string(b) != fmt.Sprintf("file %d\n", i) {
			t.Errorf("f%d.txt: %q, %v", i, b, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "many", "run.sh")); err != nil || fi.Mode()&0o100 == 0 {
		t.Errorf("run.sh came back with mode %v (%v), want executable", fi.Mode(), err)
	}
}

// TestFromJobStagesAnEarlierJobsOutput: job B reads job A's output at
// /data/<name>; the client only names A, and nothing of A's output passes
// through it. from_job on a failed or an unknown job is refused with why.
func TestFromJobStagesAnEarlierJobsOutput(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	a := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "mkdir -p $E31_OUTPUT/model && echo weights-42 > $E31_OUTPUT/model/weights.txt && printf '#!/bin/sh\necho tool\n' > $E31_OUTPUT/model/tool.sh && chmod +x $E31_OUTPUT/model/tool.sh"]}
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
output: [model]
`, nil))
	if rec, code := ts.wait(a); code != 0 {
		t.Fatalf("job a: %s (%s)", rec.Outcome, rec.Reason)
	}
	b := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "test -x $E31_DATA/a/model/tool.sh && $E31_DATA/a/model/tool.sh > $E31_OUTPUT/tool.txt && cp $E31_DATA/a/model/weights.txt $E31_OUTPUT/used.txt"]}
data: [{name: a, from_job: `+a+`}]
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
output: [used.txt, tool.txt]
`, nil))
	rec, code := ts.wait(b)
	if code != 0 {
		t.Fatalf("job b: %s (%s)", rec.Outcome, rec.Reason)
	}
	dir := t.TempDir()
	if _, errOut, code := ts.cli("output", b, "-o", dir, "--quiet"); code != 0 {
		t.Fatal(errOut)
	}
	for file, want := range map[string]string{"used.txt": "weights-42", "tool.txt": "tool"} {
		if got, _ := os.ReadFile(filepath.Join(dir, file)); strings.TrimSpace(string(got)) != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	// What the client asked for is only A's id; SUBMIT staged A's returned
	// folder (its manifest) as it is.
	var requested, submitted events.DataRef
	evs, err := bus.ReadJob(context.Background(), ts.c.JetStream(), b, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		switch ev := e.Event.(type) {
		case *events.JobRequested:
			requested = ev.Spec.Data[0]
		case *events.JobSubmitted:
			submitted = ev.Spec.Data[0]
		}
	}
	aRec, _ := ts.wait(a)
	if requested.Digest != "" || requested.FromJob != a {
		t.Errorf("the request carried %+v; want only from_job %s", requested, a)
	}
	if submitted.Digest != aRec.Output.Manifest || submitted.Kind != "dir" || submitted.Files != 2 {
		t.Errorf("staged %+v, want the folder of a's output, manifest %s", submitted, aRec.Output.Manifest)
	}

	failed := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "exit 3"]}
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
`, nil))
	ts.wait(failed)
	for from, why := range map[string]string{failed: "did not succeed (failed)", "no-such-job-7": "no such job"} {
		id := ts.submit(writeJob(t, `
work: {command: ["/bin/true"]}
data: [{name: x, from_job: `+from+`}]
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
`, nil))
		rec, code := ts.wait(id)
		if code != exitFailed || rec.Outcome != events.Rejected || !strings.Contains(rec.Reason, why) || !strings.Contains(rec.Reason, from) {
			t.Errorf("from_job %s: %s (%q), want rejected saying %q", from, rec.Outcome, rec.Reason, why)
		}
	}
}

// TestDeletingOutputAndData: the submitter fetches and deletes the output,
// then deletes the staged data. Each deletion is a request and a fact in
// the log, the hold record shows when, the output can no longer be fetched
// or used as from_job, and the audit still passes.
func TestDeletingOutputAndData(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	id := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "wc -c < $E31_DATA/in/a.txt > $E31_OUTPUT/n.txt"]}
data: [{name: in, path: ./in}]
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
output: [n.txt]
retention: 1h
`, map[string]string{"in/a.txt": "twelve bytes"}))
	if rec, code := ts.wait(id); code != 0 {
		t.Fatalf("%s: %s", rec.Outcome, rec.Reason)
	}

	stored := func() []wire.Stored {
		// OUTPUT's stored endpoint answers anyone who may ask it about
		// every job: only the operator and the auditor may.
		out, errOut, code := ts.cliAs("operator", "data", "ls", "--json", "--all")
		if code != 0 {
			t.Fatalf("e31 data ls: exit %d: %s", code, errOut)
		}
		var jobs []wire.Stored
		if err := json.Unmarshal([]byte(out), &jobs); err != nil {
			t.Fatalf("e31 data ls --json printed %q", out)
		}
		return jobs
	}
	jobs := stored()
	if len(jobs) != 1 || jobs[0].Job != id || jobs[0].Data.Bytes != 12 || jobs[0].Output.Files != 1 || jobs[0].Expires == nil || jobs[0].RetentionSeconds != 3600 {
		t.Fatalf("stored %+v, want the job's data and output, expiring in an hour", jobs)
	}

	dir := t.TempDir()
	// A deletion request does not name who asks, so submitters may not ask
	// yet (SECURITY.md): the operator deletes.
	out, errOut, code := ts.cliAs("operator", "output", id, "-o", dir, "--quiet", "--delete")
	if code != 0 || !strings.Contains(out, "output deleted") {
		t.Fatalf("e31 output --delete: exit %d: %s %s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "n.txt")); strings.TrimSpace(string(b)) != "12" {
		t.Errorf("n.txt = %q, written before the deletion", b)
	}
	if _, errOut, code := ts.cli("output", id, "-o", t.TempDir()); code != exitFailed || !strings.Contains(errOut, "deleted") {
		t.Errorf("e31 output after the deletion: exit %d: %s", code, errOut)
	}
	if _, errOut, code := ts.cli("logs", id); code != exitFailed || !strings.Contains(errOut, "deleted with its output") {
		t.Errorf("e31 logs after the output was deleted: exit %d: %s", code, errOut)
	}
	if out, _, code := ts.cliAs("operator", "data", "rm", id); code != 0 || !strings.Contains(out, "data deleted") {
		t.Fatalf("e31 data rm: exit %d: %s", code, out)
	}
	if out, _, code := ts.cliAs("operator", "data", "rm", "--all", id); code != 0 || !strings.Contains(out, "already deleted") {
		t.Errorf("e31 data rm again: exit %d: %s", code, out)
	}
	if jobs := stored(); len(jobs) != 0 {
		t.Errorf("stored %+v after both were deleted", jobs)
	}

	// The ledger answers as of everything logged so far, deletions included.
	out, _, _ = ts.cli("ledger", id, "--json")
	var rec hold.HoldRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("e31 ledger --json printed %q", out)
	}
	if rec.Output.DeletedAt == nil || rec.DataDeletedAt == nil || rec.Outcome != events.Succeeded {
		t.Errorf("record %+v: want succeeded, with when its output and data were deleted", rec)
	}
	kinds := strings.Join(ts.kinds(id), ",")
	if !strings.HasSuffix(kinds, "ComputeReleased,DeleteRequested,Deleted,DeleteRequested,Deleted") {
		t.Errorf("events %s: want each deletion requested, then recorded, after the job's end", kinds)
	}

	later := ts.submit(writeJob(t, `
work: {command: ["/bin/true"]}
data: [{name: x, from_job: `+id+`}]
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
`, nil))
	if rec, _ := ts.wait(later); rec.Outcome != events.Rejected || !strings.Contains(rec.Reason, "output was deleted") {
		t.Errorf("from_job of deleted output: %s (%q), want rejected", rec.Outcome, rec.Reason)
	}
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 {
		t.Errorf("e31 audit after deletions: exit %d\n%s", code, out)
	}
}
