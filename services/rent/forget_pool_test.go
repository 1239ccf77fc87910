package rent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/rent"
)

// TestPoolRemembersOnlyTheLastEndedJobs: past RememberEnded, the pool
// forgets the jobs that ended first; a job that runs after one it forgot
// waits until the Service tells it how that one ended (Resolve), and is
// then held or rejected as if it had just ended; one that runs after a job
// not accepted yet waits for that job's own events.
func TestPoolRemembersOnlyTheLastEndedJobs(t *testing.T) {
	t.Parallel()
	p := rent.NewPool(rent.PoolConfig{RememberEnded: 2}, func() time.Time { return t0 })
	var h history
	applyAll(p, h.log(announce("n1", 4)))
	for _, j := range []struct {
		id      string
		outcome events.Outcome
	}{{"a", events.Succeeded}, {"b", events.Failed}, {"c", events.Succeeded}, {"d", events.Succeeded}} {
		applyAll(p, h.log(submit(j.id, 1)))
		applyAll(p, h.stored(p.Decide(8)))
		applyAll(p, h.log(ended(j.id, 1, "n1", 1, j.outcome, true)))
	}
	if all, live := p.Tracked(); all != 2 || live != 0 {
		t.Fatalf("after 4 jobs ended the pool keeps %d jobs, %d live; want the last 2, none live", all, live)
	}
	for id, want := range map[string]string{"a": "unknown", "b": "unknown", "c": "over", "d": "over"} {
		if got := p.Why(id).State; got != want {
			t.Errorf("Why(%s).State = %q, want %q", id, got, want)
		}
	}

	// c is remembered: its dependent goes at once. a and b are forgotten,
	// x is not accepted yet: theirs wait.
	applyAll(p, h.log(submit("after-c", 1, after("c")), submit("after-a", 1, after("a")), submit("after-b", 1, after("b")), submit("after-x", 1, after("x"))))
	if got, want := describe(p.Decide(8)), []string{"hold after-c#1 on n1"}; !slices.Equal(got, want) {
		t.Fatalf("decided %v, want %v: only the job after one remembered", got, want)
	}
	if got, want := p.Unresolved(), []string{"a", "b", "x"}; !slices.Equal(got, want) {
		t.Fatalf("Unresolved() = %v, want %v", got, want)
	}
	p.Resolve("a", true, events.Succeeded, 0)
	p.Resolve("b", true, events.Failed, 0)
	p.Resolve("x", false, "", 0)
	if got := p.Unresolved(); len(got) != 0 {
		t.Errorf("Unresolved() after Resolve = %v, want none", got)
	}
	if got, want := describe(p.Decide(8)), []string{"reject after-b", "hold after-c#1 on n1", "hold after-a#1 on n1"}; !slices.Equal(got, want) {
		t.Errorf("decided %v, want %v", got, want)
	}
	if got := p.Why("after-x").State; got != "waiting" {
		t.Errorf("the job after x, not accepted yet, is %q, want waiting", got)
	}
	// A late copy of the release of a forgotten job gives nothing back.
	applyAll(p, h.stored(p.Decide(8)))
	applyAll(p, h.log(ended("a", 1, "n1", 4, events.Succeeded, true)))
	applyAll(p, h.log(submit("big", 4)))
	if got := describe(p.Decide(8)); len(got) != 0 {
		t.Errorf("decided %v after a late release of a forgotten job, want nothing: the node is busy", got)
	}
}
