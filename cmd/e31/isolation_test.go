package main

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run"
)

// TestHoldRecordSaysHowTheJobWasIsolated: the hold record of a job says the
// isolation it ran under: none on a node started with --executor process,
// the sandbox on one with the default executor (as root).
func TestHoldRecordSaysHowTheJobWasIsolated(t *testing.T) {
	t.Parallel()
	for executor, want := range map[string]events.Isolation{"process": events.IsolationNone, testExecutor: events.IsolationSandbox} {
		t.Run(executor, func(t *testing.T) {
			t.Parallel()
			ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 1, node: run.Config{ExecutorKind: executor}})
			id := ts.submit(writeJob(t, `
work: {command: ["/bin/true"]}
request: {cpu: 0.5, memory: 64MiB, limit: 1m}
`, nil))
			rec, code := ts.wait(id)
			if code != exitOK || rec.Outcome != events.Succeeded {
				t.Fatalf("outcome %s (exit %d), want succeeded", rec.Outcome, code)
			}
			if rec.Isolation != want {
				t.Errorf("the record says isolation %q, want %q", rec.Isolation, want)
			}
		})
	}
}
