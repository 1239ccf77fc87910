package events_test

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// A sweep's cancel has an id of its own per round, so that a cancel asked
// after a resubmission is not dropped as a repeat of one asked before it,
// while a job's cancel keeps the id it always had.
func TestSweepCancelIDsNameTheRound(t *testing.T) {
	t.Parallel()
	for ev, want := range map[*events.CancelRequested]string{
		{By: "alice"}:                        "s1/cancel",
		{By: "alice", Sweep: true}:           "s1/cancel/sweep-0",
		{By: "alice", Sweep: true, Round: 2}: "s1/cancel/sweep-2",
	} {
		if got := events.ID("s1", ev); got != want {
			t.Errorf("ID(%+v) = %q, want %q", ev, got, want)
		}
		if _, sweep := events.SweepCancel(ev); sweep != ev.Sweep {
			t.Errorf("SweepCancel(%+v) = %v", ev, sweep)
		}
	}
	if _, sweep := events.SweepCancel(&events.JobCancelled{}); sweep {
		t.Error("a JobCancelled is no sweep's cancel")
	}
}
