package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// A job that ignores SIGTERM is killed at its limit, not a grace period
// after it: the hold (the meter) never passes the limit by more than the
// second it takes to release. The job is told its deadline and grace, and
// hears SIGTERM before the deadline.
func TestJobThatIgnoresTermIsHeldNoLongerThanItsLimit(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	id := ts.submit(writeJob(t, `
work:
  command: ["/bin/sh", "-c", "echo $E31_DEADLINE $E31_GRACE_SECONDS > $E31_OUTPUT/told.txt; trap 'date +%s.%N > $E31_OUTPUT/term.txt' TERM; while :; do sleep 0.1; done"]
request: {cpu: 0.5, memory: 64MiB, limit: 3s}
output: [told.txt, term.txt]
`, nil))
	rec, code := ts.wait(id)
	if code != exitFailed || rec.Outcome != events.LimitExceeded {
		t.Fatalf("outcome %s (exit %d): %s, want limit_exceeded", rec.Outcome, code, rec.Reason)
	}
	t.Logf("a TERM-ignoring job with limit 3s was held %.3f s", rec.HeldSeconds)
	if rec.HeldSeconds > 4 || rec.HeldSeconds < 3 {
		t.Errorf("held %.3f s, want at most its 3 s limit + 1 s", rec.HeldSeconds)
	}

	dir := t.TempDir()
	if _, errOut, code := ts.cli("output", id, "-o", dir, "--quiet"); code != 0 {
		t.Fatalf("e31 output: exit %d: %s", code, errOut)
	}
	told, err := os.ReadFile(filepath.Join(dir, "told.txt"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(told))
	if len(f) != 2 {
		t.Fatalf("told.txt = %q, want E31_DEADLINE and E31_GRACE_SECONDS", told)
	}
	deadline, err := time.Parse(time.RFC3339Nano, f[0])
	if err != nil {
		t.Fatalf("E31_DEADLINE %q is not RFC 3339: %v", f[0], err)
	}
	// The limit counts from the hold, when the meter started.
	if want := rec.HeldAt.Add(3 * time.Second); deadline.Sub(want).Abs() > 100*time.Millisecond {
		t.Errorf("E31_DEADLINE = %s, want the hold (%s) plus the 3 s limit", deadline, rec.HeldAt)
	}
	// The test nodes' grace is 500ms; a 3 s limit shrinks it to a tenth.
	if f[1] != "0.3" {
		t.Errorf("E31_GRACE_SECONDS = %q, want 0.3 (a tenth of the limit)", f[1])
	}
	term, err := os.ReadFile(filepath.Join(dir, "term.txt"))
	if err != nil {
		t.Fatalf("the job never heard SIGTERM: %v", err)
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(string(term)), 64)
	if err != nil {
		t.Fatalf("term.txt = %q", term)
	}
	heard := time.Unix(0, int64(secs*1e9))
	if heard.After(deadline) || heard.Before(deadline.Add(-time.Second)) {
		t.Errorf("SIGTERM came at %s, want in the grace period before the deadline %s", heard, deadline)
	}
}
