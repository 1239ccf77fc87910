package audit

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// TestRecordIsolationIsTheLastStarts: the audit's record says the isolation
// of the last attempt that started, as the ledger's does.
func TestRecordIsolationIsTheLastStarts(t *testing.T) {
	t.Parallel()
	zero := 0
	l := newLog(t).submitted("j")
	h1, h2 := holdOf("n1", 1, 1), holdOf("n1", 2, 1)
	l.add("j", &events.ComputeHeld{Hold: h1, Submitter: "alice", Spec: spec}).
		add("j", &events.RunStarted{Hold: h1, Isolation: events.IsolationSandbox}).
		add("j", &events.HoldLost{Hold: h1, Reason: "lease expired"}).
		add("j", &events.ComputeReleased{Hold: h1, Outcome: events.NodeLost}).
		add("j", &events.ComputeHeld{Hold: h2, Submitter: "alice", Spec: spec}).
		add("j", &events.RunStarted{Hold: h2, Isolation: events.IsolationContainer}).
		add("j", &events.RunStopped{Hold: h2, Outcome: events.Succeeded, ExitCode: &zero})
	rep := l.audit(Options{})
	if !rep.OK() {
		t.Fatalf("findings on a legal log: %+v", rep.Findings)
	}
	if got := rep.Records["j"].Isolation; got != events.IsolationContainer {
		t.Errorf("isolation %q, want the last start's: container", got)
	}
}
