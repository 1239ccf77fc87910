package rent_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/rent"
)

// What a lost node, staged inputs and a node's isolation change in RENT's
// decisions: a lost node is never the job's fault, inputs take node disk,
// and a node that runs jobs unisolated without leave holds nothing.

// expire is RENT's record that a node's lease (of its first boot) lapsed.
func expire(node string) step {
	return step{node, &events.NodeExpired{Node: node, Boot: "boot-1", Reason: "its lease was not renewed in time"}}
}

// lost is the HoldLost of an attempt held with holdOf().
func lost(job string, attempt int, node string, cpu float64) step {
	return step{job, &events.HoldLost{
		Hold:   events.Hold{Attempt: attempt, Node: node, CPU: cpu, MemoryBytes: gib, DiskBytes: 1 << 20},
		Reason: "node stopped renewing its lease"}}
}

// stopFrom is a RunStopped of an attempt held with holdOf(), as node
// publishes it: under its own name.
func stopFrom(job string, attempt int, node string, cpu float64) step {
	return step{job, &events.RunStopped{
		Hold:    events.Hold{Attempt: attempt, Node: node, CPU: cpu, MemoryBytes: gib, DiskBytes: 1 << 20},
		Outcome: events.Succeeded}}
}

// announceNode announces a node with the disk and isolation given.
func announceNode(node string, cpu float64, disk int64, iso events.Isolation, allow bool) step {
	return step{node, &events.NodeAnnounced{Node: node, Boot: "boot-1", CPU: cpu, MemoryBytes: 16 * gib, DiskBytes: disk,
		Isolation: iso, AllowUnisolated: allow}}
}

// input gives the job a staged input of n bytes.
func input(n int64) opt {
	return func(s *events.JobSpec) {
		s.Data = append(s.Data, events.DataRef{Name: "in", Digest: "sha256:00", Kind: "file", Bytes: n})
	}
}

// fromJob gives the job an input from a job that had not finished when it
// was submitted: SUBMIT could not size it, and the job runs after it.
func fromJob(job string) opt {
	return func(s *events.JobSpec) {
		s.Data = append(s.Data, events.DataRef{Name: "model", FromJob: job})
		s.After = append(s.After, job)
	}
}

// returned is the OutputReturned of an attempt held with holdOf().
func returned(job string, attempt int, node string, cpu float64, bytes int64) step {
	return step{job, &events.OutputReturned{
		Hold:    events.Hold{Attempt: attempt, Node: node, CPU: cpu, MemoryBytes: gib, DiskBytes: 1 << 20},
		Outcome: events.Succeeded, Bytes: bytes, Files: []events.OutputFile{}, Missing: []string{}}}
}

func TestPoolDecideLostNodesInputsAndIsolation(t *testing.T) {
	t.Parallel()
	// big can hold a 4-cpu job; small cannot.
	pool := []step{announce("big", 8), announce("small", 2)}
	tests := []struct {
		name string
		log  []step
		want []string
	}{
		{
			name: "a job held once waits when its node is lost, though no live node can hold it",
			log: append(slices.Clone(pool), submit("a", 4), holdOf("a", 1, "big", 4), expire("big"),
				lost("a", 1, "big", 4), release("a", 1, "big", 4, false)),
			want: []string{},
		},
		{
			name: "a job held once and lost with its node is held again when the node returns",
			log: append(slices.Clone(pool), submit("a", 4), holdOf("a", 1, "big", 4), expire("big"),
				lost("a", 1, "big", 4), release("a", 1, "big", 4, false), reannounce("big", 8)),
			want: []string{"hold a#2 on big"},
		},
		{
			name: "a held job on an expired node is lost, and only once its release comes is it queued",
			log:  append(slices.Clone(pool), submit("a", 4), holdOf("a", 1, "big", 4), expire("big")),
			want: []string{"lose a#1 on big"},
		},
		{
			name: "a stop another node published of the attempt does not keep it from being lost with its node",
			log: append(slices.Clone(pool), submit("a", 4), holdOf("a", 1, "big", 4),
				stopFrom("a", 1, "small", 4), expire("big")),
			want: []string{"lose a#1 on big"},
		},
		{
			name: "the holder's own stop does: its return and release follow",
			log: append(slices.Clone(pool), submit("a", 4), holdOf("a", 1, "big", 4),
				stopFrom("a", 1, "big", 4), expire("big")),
			want: []string{},
		},
		{
			name: "a job submitted while the only node that can hold it was just lost waits for it",
			log:  append(slices.Clone(pool), expire("big"), submit("a", 4), submit("b", 1)),
			want: []string{"hold b#1 on small"},
		},
		{
			name: "a job waiting (never held) is not rejected when the only node that can hold it is lost",
			log: append(slices.Clone(pool), submit("x", 8), holdOf("x", 1, "big", 8), submit("a", 4),
				expire("big"), lost("x", 1, "big", 8), release("x", 1, "big", 8, false)),
			want: []string{},
		},
		{
			name: "a job submitted to a pool whose every node is lost waits for them to return",
			log:  []step{announce("big", 8), expire("big"), submit("a", 4), reannounce("big", 8)},
			want: []string{"hold a#1 on big"},
		},
		{
			name: "a job larger than every node, lost ones included, is still rejected",
			log:  append(slices.Clone(pool), expire("big"), submit("huge", 16)),
			want: []string{"reject huge"},
		},
		{
			name: "staged inputs and request.disk beyond every node's disk: rejected",
			log:  []step{announce("n1", 8), submit("a", 1, input(100*gib))},
			want: []string{"reject a"},
		},
		{
			name: "staged inputs that fit a node's disk with request.disk are held",
			log:  []step{announce("n1", 8), submit("a", 1, input(100*gib-(1<<20)))},
			want: []string{"hold a#1 on n1"},
		},
		{
			name: "staged inputs go to the node whose disk holds them, not the one with most cpu",
			log: []step{announceNode("wide", 8, 10*gib, "", false), announceNode("deep", 2, 100*gib, "", false),
				submit("a", 1, input(50*gib))},
			want: []string{"hold a#1 on deep"},
		},
		{
			name: "staged inputs of jobs held together share the node's disk",
			log:  []step{announce("n1", 8), submit("a", 1, input(60*gib)), submit("b", 1, input(60*gib))},
			want: []string{"hold a#1 on n1"},
		},
		{
			name: "an input from a job unfinished at submission counts once that job returned it",
			log: []step{announce("n1", 8), submit("first", 1), submit("then", 1, fromJob("first")),
				holdOf("first", 1, "n1", 1), returned("first", 1, "n1", 1, 200*gib), release("first", 1, "n1", 1, true)},
			want: []string{"reject then"},
		},
		{
			name: "an input from a job unfinished at submission that fits is held",
			log: []step{announce("n1", 8), submit("first", 1), submit("then", 1, fromJob("first")),
				holdOf("first", 1, "n1", 1), returned("first", 1, "n1", 1, 10*gib), release("first", 1, "n1", 1, true)},
			want: []string{"hold then#1 on n1"},
		},
		{
			name: "a node that runs jobs unisolated without leave holds nothing, and judges nothing",
			log:  []step{announceNode("bare", 8, 100*gib, events.IsolationNone, false), submit("a", 1)},
			want: []string{},
		},
		{
			name: "a node that runs jobs unisolated with its operator's leave holds them",
			log:  []step{announceNode("bare", 8, 100*gib, events.IsolationNone, true), submit("a", 1)},
			want: []string{"hold a#1 on bare"},
		},
		{
			name: "a sandboxed node holds jobs",
			log:  []step{announceNode("boxed", 8, 100*gib, events.IsolationSandbox, false), submit("a", 1)},
			want: []string{"hold a#1 on boxed"},
		},
		{
			name: "a job only an unisolated node without leave could hold is rejected",
			log: []step{announce("small", 2), announceNode("bare", 8, 100*gib, events.IsolationNone, false),
				submit("a", 4), submit("b", 1)},
			want: []string{"reject a", "hold b#1 on small"},
		},
		{
			name: "a node that announces itself again with isolation none and no leave holds nothing more",
			log: []step{announce("n1", 8), submit("a", 1), holdOf("a", 1, "n1", 1),
				step{"n1", &events.NodeAnnounced{Node: "n1", Boot: "boot-2", CPU: 8, MemoryBytes: 16 * gib, DiskBytes: 100 * gib, Isolation: events.IsolationNone}},
				submit("b", 1)},
			want: []string{},
		},
	}
	for _, tt := range tests {
		for how, twice := range map[string]bool{"once": false, "the whole log again": true} {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				var h history
				p := newPool()
				envs := h.log(tt.log...)
				applyAll(p, envs)
				if twice {
					applyAll(p, envs)
				}
				if got := describe(p.Decide(100)); !slices.Equal(got, tt.want) {
					t.Errorf("Decide = %q\nwant %q", got, tt.want)
				}
			})
		}
	}
}

// TestPoolRemembersALostNodeForAWhile: whether a job could ever be held is
// judged when it is queued, by the log's times: a node lost within
// RememberLost counts, one lost longer ago does not. Once judged, a job is
// not judged again, by this pool or by one rebuilt from the same log later.
func TestPoolRemembersALostNodeForAWhile(t *testing.T) {
	t.Parallel()
	var h history
	at := func(d time.Duration, s step) events.Envelope {
		env := h.log(s)[0]
		env.Time = t0.Add(d)
		h.envs[len(h.envs)-1] = env
		return env
	}
	log := []events.Envelope{
		at(0, announce("big", 8)), at(0, announce("small", 2)),
		// big is busy, so a waits for it.
		at(0, submit("x", 8)), at(0, holdOf("x", 1, "big", 8)), at(0, submit("a", 4)),
		at(time.Minute, expire("big")), at(time.Minute, lost("x", 1, "big", 8)), at(time.Minute, release("x", 1, "big", 8, false)),
		at(time.Minute+rent.DefaultRememberLost-time.Second, submit("b", 4)),
		at(time.Minute+rent.DefaultRememberLost, submit("c", 4)),
	}
	later := t0.Add(24 * time.Hour)
	for _, how := range []string{"followed", "rebuilt a day later"} {
		clock := t0.Add(time.Minute + rent.DefaultRememberLost)
		if how != "followed" {
			clock = later
		}
		p := rent.NewPool(rent.PoolConfig{}, func() time.Time { return clock })
		applyAll(p, log)
		if got, want := describe(p.Decide(100)), []string{"reject c"}; !slices.Equal(got, want) {
			t.Fatalf("%s: Decide = %q, want %q: x was held and a, b were judged while big was lost for less than %s",
				how, got, want, rent.DefaultRememberLost)
		}
		for job, says := range map[string][]string{
			"x": {"waits for big", "never the job's fault"},
			"a": {"waits for big", "lost (its lease lapsed)"},
			"b": {"waits for big"},
		} {
			why := p.Why(job).Reason
			for _, s := range says {
				if !strings.Contains(why, s) {
					t.Errorf("%s: Why(%s) = %q, want it to say %q", how, job, why, s)
				}
			}
		}
	}
}

// TestPoolHoldsInputsOnTheNodesDisk: the disk a hold takes is request.disk
// and the staged inputs, in ComputeHeld, and in HoldLost when its node is
// lost, so that RELEASE gives back what was taken and the audit's capacity
// check adds up.
func TestPoolHoldsInputsOnTheNodesDisk(t *testing.T) {
	t.Parallel()
	var h history
	p := newPool()
	applyAll(p, h.log(announce("n1", 8), submit("a", 1, input(3*gib), input(2*gib))))
	ds := p.Decide(100)
	if len(ds) != 1 {
		t.Fatalf("Decide = %q, want one hold", describe(ds))
	}
	held := ds[0].Event.(*events.ComputeHeld)
	if want := int64(5*gib + 1<<20); held.DiskBytes != want || held.Spec.Request.DiskBytes != 1<<20 {
		t.Fatalf("held %d bytes of disk for request.disk %d, want %d: request.disk and the inputs", held.DiskBytes, held.Spec.Request.DiskBytes, want)
	}
	applyAll(p, h.stored(ds))
	applyAll(p, h.log(expire("n1")))
	ds = p.Decide(100)
	if len(ds) != 1 {
		t.Fatalf("after the node expired, Decide = %q, want the hold lost", describe(ds))
	}
	if hl, ok := ds[0].Event.(*events.HoldLost); !ok || !events.SameHold(hl.Hold, held.Hold) {
		t.Errorf("decided %+v, want HoldLost of the hold %+v", ds[0].Event, held.Hold)
	}
}

func TestPoolWhyLostNodesInputsAndIsolation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		log    []step
		job    string
		reason []string
	}{
		{
			name: "held once, its node lost",
			log: []step{announce("big", 8), announce("small", 2), submit("a", 4), holdOf("a", 1, "big", 4), expire("big"),
				lost("a", 1, "big", 4), release("a", 1, "big", 4, false)},
			job:    "a",
			reason: []string{"no node in the pool can hold it now", "waits for big", "attempt 1", "never the job's fault"},
		},
		{
			name:   "every node lost",
			log:    []step{announce("big", 8), expire("big"), submit("a", 4)},
			job:    "a",
			reason: []string{"no node in the pool is live", "waits for big"},
		},
		{
			name:   "only an unisolated node",
			log:    []step{announceNode("bare", 8, 100*gib, events.IsolationNone, false), submit("a", 1)},
			job:    "a",
			reason: []string{"no compute node has joined", "bare announces isolation none", "holds no jobs"},
		},
		{
			name: "rejected for needing an unisolated node",
			log: []step{announce("small", 2), announceNode("bare", 8, 100*gib, events.IsolationNone, false),
				submit("a", 4)},
			job:    "a",
			reason: []string{"will be rejected", "no node in the pool can ever hold it", "bare announces isolation none"},
		},
		{
			name:   "waiting for a node whose disk holds its inputs",
			log:    []step{announce("n1", 8), submit("a", 1, input(200*gib), waitForNode)},
			job:    "a",
			reason: []string{"request.disk 1 MiB and 200 GiB of staged inputs", "the largest node has 8 cpu, 16 GiB memory, 100 GiB disk"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var h history
			p := newPool()
			applyAll(p, h.log(tt.log...))
			got := p.Why(tt.job).Reason
			for _, want := range tt.reason {
				if !strings.Contains(got, want) {
					t.Errorf("Why(%s).Reason = %q, want it to say %q", tt.job, got, want)
				}
			}
		})
	}
}

// The nodes the pool counts live are what RENT's lease checks read (through
// Leased and LeasedBoot, never the pool's fields): a node whose lease lapsed
// is not among them until it announces again, with its new boot.
func TestLeasedListsTheNodesWhoseLeaseHasNotLapsed(t *testing.T) {
	t.Parallel()
	var h history
	p := newPool()
	applyAll(p, h.log(announce("n1", 4), announce("n2", 4), expire("n2")))
	if got := p.Leased(); !slices.Equal(got, []string{"n1"}) || p.Nodes() != 2 {
		t.Errorf("leased %v of %d nodes, want [n1] of 2", got, p.Nodes())
	}
	if boot, ok := p.LeasedBoot("n1"); !ok || boot != "boot-1" {
		t.Errorf("n1: boot %q, %v; want boot-1, true", boot, ok)
	}
	if _, ok := p.LeasedBoot("n2"); ok {
		t.Error("n2's lease lapsed, and the pool still counts it live")
	}
	applyAll(p, h.log(reannounce("n2", 4)))
	if boot, ok := p.LeasedBoot("n2"); !ok || boot != "boot-2" || !slices.Equal(p.Leased(), []string{"n1", "n2"}) {
		t.Errorf("n2 announced again: boot %q, %v, leased %v", boot, ok, p.Leased())
	}
}
