package ledger_test

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// A sweep's cancel is about every member of the sweep, so in no record:
// the sweep's id gets none, and the member cancelled after it lists only
// its own events.
func TestProjectionKeepsASweepsCancelInNoRecord(t *testing.T) {
	t.Parallel()
	var h history
	spec := specOf("point")
	spec.Sweep = &events.SweepPoint{ID: "s", Index: 0, Count: 1, Value: "0"}
	h.add("s-0", at("0s"), &events.JobRequested{Submitter: "alice", Spec: spec})
	h.add("s-0", at("1s"), &events.JobSubmitted{Submitter: "alice", Spec: spec})
	h.add("s", at("2s"), &events.CancelRequested{By: "alice", Sweep: true})
	h.add("s-0", at("3s"), &events.JobCancelled{Reason: "cancelled before compute was held"})
	p := project(t, h.envs)
	if rec, _, known, _ := p.Lookup("s"); known || rec != nil {
		t.Errorf("the sweep's id has a record (%v), or is known (%v)", rec, known)
	}
	r := p.Record("s-0")
	if r == nil || r.State != hold.StateCancelled || len(r.Events) != 3 {
		t.Fatalf("member's record %+v: want cancelled, with its own three events", r)
	}
	if p.Applied() != 4 || p.Len() != 1 {
		t.Errorf("applied %d, %d records: want 4 and 1", p.Applied(), p.Len())
	}
}
