package rent_test

import (
	"slices"
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// member puts a job in a sweep, at an index.
func member(sweep string, index int) opt {
	return func(s *events.JobSpec) { s.Sweep = &events.SweepPoint{ID: sweep, Index: index, Count: 3} }
}

// again makes a sweep's member one submitted again in round.
func again(round int) opt { return func(s *events.JobSpec) { s.Sweep.Again = round } }

func cancelSweep(sweep, by string) step {
	return step{sweep, &events.CancelRequested{By: by, Sweep: true}}
}

// One cancel of a sweep cancels each of its waiting members of its round
// or before that its sender may cancel, those submitted after it too, and
// nothing else: not another sweep's jobs, not a member already held (RUN
// stops it), not a member of a later round.
func TestPoolCancelsASweepsWaitingMembers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		log  []step
		want []string
	}{
		{
			name: "every waiting member, and only the sweep's",
			log: []step{submit("s-0", 1, member("s", 0)), submit("s-1", 1, member("s", 1)), submit("x", 1),
				submit("t-0", 1, member("t", 0)), cancelSweep("s", "alice")},
			want: []string{"cancel s-0", "cancel s-1"},
		},
		{
			name: "another tenant's cancel of the sweep changes nothing",
			log:  []step{submit("s-0", 1, member("s", 0)), submit("s-1", 1, member("s", 1)), cancelSweep("s", "bob")},
			want: []string{},
		},
		{
			name: "the operator's does",
			log:  []step{submit("s-0", 1, member("s", 0)), cancelSweep("s", events.Operator)},
			want: []string{"cancel s-0"},
		},
		{
			name: "a held member is left to its node, the waiting ones are cancelled",
			log: []step{announce("n1", 1), submit("s-0", 1, member("s", 0)), holdOf("s-0", 1, "n1", 1),
				submit("s-1", 1, member("s", 1)), cancelSweep("s", "alice")},
			want: []string{"cancel s-1"},
		},
		{
			name: "a member submitted after the cancel, still being submitted, is cancelled",
			log: []step{announce("n1", 2), submit("s-0", 1, member("s", 0)), holdOf("s-0", 1, "n1", 1),
				cancelSweep("s", "alice"), submit("s-1", 1, member("s", 1))},
			want: []string{"cancel s-1"},
		},
		{
			name: "a member submitted again in a later round is held",
			log: []step{announce("n1", 2), submit("s-0", 1, member("s", 0)), holdOf("s-0", 1, "n1", 1),
				cancelSweep("s", "alice"), submit("s-1-a1", 1, member("s", 1), again(1))},
			want: []string{"hold s-1-a1#1 on n1"},
		},
		{
			name: "a cancel of a later round covers the members of earlier ones",
			log: []step{submit("s-1-a1", 1, member("s", 1), again(1)), submit("s-2-a2", 1, member("s", 2), again(2)),
				step{"s", &events.CancelRequested{By: "alice", Sweep: true, Round: 1}}},
			want: []string{"cancel s-1-a1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPool()
			var h history
			applyAll(p, h.log(tc.log...))
			got := describe(p.Decide(100))
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("decisions %v, want %v", got, tc.want)
			}
		})
	}
}

// A held member marked by the sweep's cancel whose node is lost is
// cancelled, not held again.
func TestPoolCancelsALostMemberOfACancelledSweep(t *testing.T) {
	t.Parallel()
	p := newPool()
	var h history
	applyAll(p, h.log(announce("n1", 1), announce("n2", 1), submit("s-0", 1, member("s", 0)), holdOf("s-0", 1, "n1", 1),
		cancelSweep("s", "alice"), release("s-0", 1, "n1", 1, false)))
	if got := describe(p.Decide(100)); !slices.Equal(got, []string{"cancel s-0"}) {
		t.Errorf("decisions %v, want the member cancelled", got)
	}
}

// A checkpoint carries the sweeps' cancels: a RENT that starts from it
// cancels a member submitted after it as the one that wrote it would.
func TestPoolCheckpointCarriesSweepCancels(t *testing.T) {
	t.Parallel()
	p := newPool()
	var h history
	applyAll(p, h.log(submit("x", 1), cancelSweep("s", "alice"), cancelSweep("t", "bob")))
	c := p.Checkpoint(p.Applied())
	if len(c.Sweeps) != 2 || c.Sweeps[0].Sweep != "s" || c.Sweeps[1].By != "bob" {
		t.Fatalf("checkpoint's sweeps %+v, want both cancels, oldest first", c.Sweeps)
	}
	q := newPool()
	q.Restore(c)
	applyAll(q, h.log(submit("s-0", 1, member("s", 0)), submit("t-0", 1, member("t", 0))))
	if got := describe(q.Decide(100)); !slices.Equal(got, []string{"cancel s-0"}) {
		t.Errorf("decisions of the restored pool %v, want s-0 cancelled (bob's cancel covers none of alice's)", got)
	}
}
