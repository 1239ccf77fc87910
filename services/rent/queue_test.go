package rent_test

import (
	"maps"
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// TestWaitingBySubmitter: the queue by submitter counts each waiting job
// once, whatever its priority, and forgets a job once it is held or
// cancelled, and a submitter with nothing waiting.
func TestWaitingBySubmitter(t *testing.T) {
	t.Parallel()
	p := newPool()
	var h history
	// No node: everything waits.
	applyAll(p, h.log(
		submitBy("alice", "a1", 1), submitBy("alice", "a2", 1, func(s *events.JobSpec) { s.Priority = 5 }),
		submitBy("bob", "b1", 1), submitBy("carol", "c1", 1),
	))
	if got, want := p.WaitingBySubmitter(), map[string]int{"alice": 2, "bob": 1, "carol": 1}; !maps.Equal(got, want) {
		t.Errorf("queue %v, want %v", got, want)
	}
	applyAll(p, h.log(announce("n1", 1)))
	applyAll(p, h.stored(p.Decide(10)))
	applyAll(p, h.log(cancel("c1"), cancelled("c1")))
	got := p.WaitingBySubmitter()
	total := 0
	for _, n := range got {
		total += n
	}
	if total != p.Waiting() || total != 2 {
		t.Errorf("after one hold and a cancel: queue %v (%d), pool says %d waiting, want 2", got, total, p.Waiting())
	}
	if _, ok := got["carol"]; ok {
		t.Errorf("carol, with nothing waiting, is in the queue: %v", got)
	}
}
