package rent_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/services/rent"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

const gib = 1 << 30

// step is one event of a job's (or node's) life, before it is logged.
type step struct {
	subject string
	ev      events.Event
}

func announce(node string, cpu float64) step {
	return step{node, &events.NodeAnnounced{Node: node, Boot: "boot-1", CPU: cpu, MemoryBytes: 16 * gib, DiskBytes: 100 * gib}}
}

func reannounce(node string, cpu float64) step {
	s := announce(node, cpu)
	a := *s.ev.(*events.NodeAnnounced)
	a.Boot = "boot-2"
	s.ev = &a
	return s
}

// opt changes a submitted job's spec.
type opt func(*events.JobSpec)

// limit sets the job's hard wall-clock limit: what backfill counts on.
func limit(d time.Duration) opt {
	return func(s *events.JobSpec) { s.Request.LimitSeconds = d.Seconds() }
}

// after makes the job wait for others to succeed.
func after(jobs ...string) opt { return func(s *events.JobSpec) { s.After = jobs } }

// waitForNode keeps a job no node can hold waiting instead of rejected.
func waitForNode(s *events.JobSpec) { s.WaitForNode = true }

func spec(cpu float64, opts ...opt) events.JobSpec {
	s := events.JobSpec{
		Work:    events.Work{Command: []string{"/bin/true"}},
		Request: events.Request{CPU: cpu, MemoryBytes: gib, DiskBytes: 1 << 20, LimitSeconds: 60},
	}
	for _, o := range opts {
		o(&s)
	}
	return s
}

func submit(job string, cpu float64, opts ...opt) step {
	return submitBy("alice", job, cpu, opts...)
}

func submitBy(submitter, job string, cpu float64, opts ...opt) step {
	return step{job, &events.JobSubmitted{Submitter: submitter, Spec: spec(cpu, opts...)}}
}

func holdOf(job string, attempt int, node string, cpu float64) step {
	return step{job, &events.ComputeHeld{
		Hold:      events.Hold{Attempt: attempt, Node: node, CPU: cpu, MemoryBytes: gib, DiskBytes: 1 << 20},
		Submitter: "alice", Spec: spec(cpu),
	}}
}

func release(job string, attempt int, node string, cpu float64, final bool) step {
	outcome := events.Succeeded
	if !final {
		outcome = events.NodeLost
	}
	return ended(job, attempt, node, cpu, outcome, final)
}

func ended(job string, attempt int, node string, cpu float64, outcome events.Outcome, final bool) step {
	return step{job, &events.ComputeReleased{
		Hold:    events.Hold{Attempt: attempt, Node: node, CPU: cpu, MemoryBytes: gib, DiskBytes: 1 << 20},
		Outcome: outcome, Final: final,
	}}
}

func cancel(job string) step { return step{job, &events.CancelRequested{By: "alice"}} }
func cancelled(job string) step {
	return step{job, &events.JobCancelled{Reason: "cancelled while waiting for compute"}}
}
func reject(job string) step {
	return step{job, &events.JobRejected{Reason: "request.cpu: must be at least 0.01"}}
}

// history stores events the way the stream would: each gets the next
// sequence. Envelopes carry pointer events, as decoded ones do. Every event
// happens at t0, which is also the pool's clock: backfill then depends only
// on the limits a table gives.
type history struct{ envs []events.Envelope }

func (h *history) log(steps ...step) []events.Envelope {
	var out []events.Envelope
	for _, s := range steps {
		env := events.New(s.subject, s.ev, "e31/test", t0)
		env.Seq = uint64(len(h.envs) + 1)
		h.envs = append(h.envs, env)
		out = append(out, env)
	}
	return out
}

// stored turns the pool's decisions into the events the service would
// append for them, in order.
func (h *history) stored(ds []rent.Decision) []events.Envelope {
	steps := make([]step, len(ds))
	for i, d := range ds {
		steps[i] = step{d.Job, d.Event}
	}
	return h.log(steps...)
}

// newPool is a pool whose clock stands at t0, with the default grace.
func newPool() *rent.Pool {
	return rent.NewPool(rent.PoolConfig{}, func() time.Time { return t0 })
}

func applyAll(p *rent.Pool, envs []events.Envelope) {
	for _, env := range envs {
		p.Apply(env)
	}
}

// describe renders decisions so that a table can say what it expects.
func describe(ds []rent.Decision) []string {
	out := []string{}
	for _, d := range ds {
		switch e := d.Event.(type) {
		case *events.ComputeHeld:
			out = append(out, fmt.Sprintf("hold %s#%d on %s", d.Job, e.Attempt, e.Node))
		case *events.JobCancelled:
			out = append(out, "cancel "+d.Job)
		case *events.JobRejected:
			out = append(out, "reject "+d.Job)
		case *events.HoldLost:
			out = append(out, fmt.Sprintf("lose %s#%d on %s", d.Job, e.Attempt, e.Node))
		default:
			out = append(out, fmt.Sprintf("%T for %s", d.Event, d.Job))
		}
	}
	return out
}

func tenths(n int, prefix string) []step {
	var out []step
	for i := range n {
		out = append(out, submit(fmt.Sprintf("%s%02d", prefix, i), 0.1))
	}
	return out
}

func TestPoolDecide(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		log  []step
		max  int
		want []string
	}{
		{
			name: "no node has joined: nothing is held",
			log:  []step{submit("a", 1)},
			want: []string{},
		},
		{
			name: "jobs are held in the order they were submitted",
			log:  []step{announce("n1", 8), submit("c", 1), submit("a", 1), submit("b", 1)},
			want: []string{"hold c#1 on n1", "hold a#1 on n1", "hold b#1 on n1"},
		},
		{
			// b can start once a is gone (its limit plus grace); c would
			// still be running then.
			name: "a job that fits a node but not now makes later jobs that would delay it wait",
			log: []step{announce("n1", 2), submit("a", 1), holdOf("a", 1, "n1", 1),
				submit("b", 2), submit("c", 1, limit(time.Hour))},
			want: []string{},
		},
		{
			name: "a later job that is gone before the waiting one can start goes ahead (backfill)",
			log: []step{announce("n1", 2), submit("a", 1, limit(time.Hour)), holdOf("a", 1, "n1", 1),
				submit("b", 2), submit("c", 1, limit(time.Minute))},
			want: []string{"hold c#1 on n1"},
		},
		{
			name: "a job no node could ever hold is rejected and does not block the queue",
			log:  []step{announce("n1", 2), submit("huge", 4), submit("b", 1)},
			want: []string{"reject huge", "hold b#1 on n1"},
		},
		{
			name: "a job no node could ever hold waits for one, if it asked to, without blocking the queue",
			log:  []step{announce("n1", 2), submit("huge", 4, waitForNode), submit("b", 1)},
			want: []string{"hold b#1 on n1"},
		},
		{
			name: "a job that asked to wait for a node is held once a large one joins",
			log:  []step{announce("n1", 2), submit("huge", 4, waitForNode), announce("n2", 8)},
			want: []string{"hold huge#1 on n2"},
		},
		{
			name: "a job is not judged against an empty pool: it waits for the first node",
			log:  []step{submit("a", 1), announce("n1", 1)},
			want: []string{"hold a#1 on n1"},
		},
		{
			name: "a job that runs after another waits for it",
			log:  []step{announce("n1", 8), submit("first", 1), submit("then", 1, after("first"))},
			want: []string{"hold first#1 on n1"},
		},
		{
			name: "a job that runs after another is held once that one succeeded",
			log: []step{announce("n1", 8), submit("first", 1), submit("then", 1, after("first")),
				holdOf("first", 1, "n1", 1), ended("first", 1, "n1", 1, events.Succeeded, true)},
			want: []string{"hold then#1 on n1"},
		},
		{
			name: "a job that runs after another is rejected when that one failed",
			log: []step{announce("n1", 8), submit("first", 1), submit("then", 1, after("first")),
				holdOf("first", 1, "n1", 1), ended("first", 1, "n1", 1, events.Failed, true)},
			want: []string{"reject then"},
		},
		{
			name: "a job submitted after the one it runs after failed is rejected",
			log: []step{announce("n1", 8), submit("first", 1), holdOf("first", 1, "n1", 1),
				ended("first", 1, "n1", 1, events.Failed, true), submit("then", 1, after("first"))},
			want: []string{"reject then"},
		},
		{
			name: "a job that runs after another keeps waiting while that one is held again",
			log: []step{announce("n1", 8), submit("first", 1), submit("then", 1, after("first")),
				holdOf("first", 1, "n1", 1), release("first", 1, "n1", 1, false)},
			want: []string{"hold first#2 on n1"},
		},
		{
			name: "a cancelled job that waits for another is cancelled at once",
			log:  []step{announce("n1", 8), submit("first", 1), submit("then", 1, after("first")), cancel("then")},
			want: []string{"cancel then", "hold first#1 on n1"},
		},
		{
			// alice holds a cpu; bob holds none, so his job goes first
			// although alice's second was submitted earlier.
			name: "the submitter holding least goes first (fair share)",
			log: []step{announce("n1", 2), submitBy("alice", "a1", 1), holdOf("a1", 1, "n1", 1),
				submitBy("alice", "a2", 1), submitBy("bob", "b1", 1)},
			want: []string{"hold b1#1 on n1"},
		},
		{
			name: "capacity is shared by every hold of one pass",
			log:  []step{announce("n1", 2), submit("a", 1), submit("b", 1), submit("c", 1)},
			want: []string{"hold a#1 on n1", "hold b#1 on n1"},
		},
		{
			name: "ten 0.1-cpu jobs fill a 1-cpu node exactly, the eleventh waits",
			log:  append([]step{announce("n1", 1)}, tenths(11, "j")...),
			want: []string{"hold j00#1 on n1", "hold j01#1 on n1", "hold j02#1 on n1", "hold j03#1 on n1", "hold j04#1 on n1",
				"hold j05#1 on n1", "hold j06#1 on n1", "hold j07#1 on n1", "hold j08#1 on n1", "hold j09#1 on n1"},
		},
		{
			// In float64, 0.1+0.2+0.3+0.4 is 1.0000000000000002.
			name: "fractions that add up to the node fill it exactly",
			log:  []step{announce("n1", 1), submit("a", 0.1), submit("b", 0.2), submit("c", 0.3), submit("d", 0.4)},
			want: []string{"hold a#1 on n1", "hold b#1 on n1", "hold c#1 on n1", "hold d#1 on n1"},
		},
		{
			name: "holds go to the node with the most free cpu, by name among equals",
			log:  []step{announce("n2", 2), announce("n1", 2), announce("n3", 4), submit("a", 1), submit("b", 1), submit("c", 1)},
			want: []string{"hold a#1 on n3", "hold b#1 on n3", "hold c#1 on n1"},
		},
		{
			name: "max bounds the holds of one pass",
			log:  []step{announce("n1", 8), submit("a", 1), submit("b", 1), submit("c", 1)},
			max:  2,
			want: []string{"hold a#1 on n1", "hold b#1 on n1"},
		},
		{
			name: "a waiting job whose cancel was requested is cancelled, never held",
			log:  []step{submit("a", 1), submit("b", 1), cancel("a"), announce("n1", 2)},
			want: []string{"cancel a", "hold b#1 on n1"},
		},
		{
			name: "a cancel seen before the job is cancelled when the job arrives",
			log:  []step{cancel("a"), announce("n1", 2), submit("a", 1)},
			want: []string{"cancel a"},
		},
		{
			name: "a held job's cancel is left to its node",
			log:  []step{announce("n1", 2), submit("a", 1), holdOf("a", 1, "n1", 1), cancel("a")},
			want: []string{},
		},
		{
			name: "a job released for a new attempt goes back to its place, ahead of later jobs",
			log: []step{announce("n1", 1), submit("a", 1), holdOf("a", 1, "n1", 1), submit("b", 1),
				release("a", 1, "n1", 1, false)},
			want: []string{"hold a#2 on n1"},
		},
		{
			name: "a final release frees the node for the next job",
			log: []step{announce("n1", 1), submit("a", 1), holdOf("a", 1, "n1", 1), submit("b", 1),
				release("a", 1, "n1", 1, true)},
			want: []string{"hold b#1 on n1"},
		},
		{
			name: "a job cancelled while held and then released for a new attempt is cancelled",
			log: []step{announce("n1", 1), submit("a", 1), holdOf("a", 1, "n1", 1), cancel("a"),
				release("a", 1, "n1", 1, false)},
			want: []string{"cancel a"},
		},
		{
			name: "rejected and cancelled jobs are never held",
			log:  []step{announce("n1", 4), submit("a", 1), cancel("a"), cancelled("a"), reject("r")},
			want: []string{},
		},
		{
			name: "a release of an attempt that is not the held one frees nothing",
			log: []step{announce("n1", 1), submit("a", 1), holdOf("a", 2, "n1", 1), submit("b", 1),
				release("a", 1, "n1", 1, true)},
			want: []string{},
		},
		{
			name: "a hold on a node not yet announced counts once the node appears",
			log:  []step{submit("x", 1), holdOf("x", 1, "n1", 1), announce("n1", 1), submit("a", 1)},
			want: []string{},
		},
		{
			name: "a node that joins again keeps what is held on it",
			log:  []step{announce("n1", 1), submit("a", 1), holdOf("a", 1, "n1", 1), reannounce("n1", 1), submit("b", 1)},
			want: []string{},
		},
		{
			name: "a node that joins again with more cpu offers only the difference",
			log:  []step{announce("n1", 1), submit("a", 1), holdOf("a", 1, "n1", 1), reannounce("n1", 2), submit("b", 1), submit("c", 1)},
			want: []string{"hold b#1 on n1"},
		},
	}
	for _, tt := range tests {
		max := tt.max
		if max == 0 {
			max = 100
		}
		// Delivery is at least once: every event may arrive twice, right
		// away or after everything else. Neither may change a decision.
		deliveries := map[string]func(p *rent.Pool, envs []events.Envelope){
			"once": applyAll,
			"each event twice": func(p *rent.Pool, envs []events.Envelope) {
				for _, env := range envs {
					p.Apply(env)
					p.Apply(env)
				}
			},
			"the whole log again": func(p *rent.Pool, envs []events.Envelope) {
				applyAll(p, envs)
				applyAll(p, envs)
			},
		}
		for how, deliver := range deliveries {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				var h history
				p := newPool()
				deliver(p, h.log(tt.log...))
				if got := describe(p.Decide(max)); !slices.Equal(got, tt.want) {
					t.Errorf("Decide(%d) = %q\nwant %q", max, got, tt.want)
				}
			})
		}
	}
}

// TestPoolDecisionsExpectTheJobsLastEvent: a decision is appended only while
// the job's log is where the pool saw it, so each carries the sequence of
// the job's own last event, not the last event of the stream.
func TestPoolDecisionsExpectTheJobsLastEvent(t *testing.T) {
	t.Parallel()
	var h history
	p := newPool()
	envs := h.log(submit("a", 1), submit("b", 1), cancel("b"), announce("n1", 4), submit("c", 8))
	applyAll(p, envs)
	got := map[string]uint64{}
	for _, d := range p.Decide(100) {
		got[d.Job] = d.Expect
	}
	want := map[string]uint64{"a": envs[0].Seq, "b": envs[2].Seq, "c": envs[4].Seq}
	if !maps.Equal(got, want) {
		t.Errorf("decisions expect %v, want %v (a's and c's JobSubmitted, b's CancelRequested)", got, want)
	}
}

// TestPoolHeldDecisionCarriesTheJob: the node runs the job from the hold
// alone, so the hold carries the submitter, the spec and what is held.
func TestPoolHeldDecisionCarriesTheJob(t *testing.T) {
	t.Parallel()
	var h history
	p := newPool()
	applyAll(p, h.log(announce("n1", 4), submit("a", 1.5)))
	ds := p.Decide(1)
	if len(ds) != 1 {
		t.Fatalf("Decide = %q, want one hold", describe(ds))
	}
	held, ok := ds[0].Event.(*events.ComputeHeld)
	if !ok {
		t.Fatalf("decision is a %T, want ComputeHeld", ds[0].Event)
	}
	want := events.Hold{Attempt: 1, Node: "n1", CPU: 1.5, MemoryBytes: gib, DiskBytes: 1 << 20}
	if !events.SameHold(held.Hold, want) || held.Submitter != "alice" || held.Spec.Request.CPU != 1.5 || len(held.Spec.Work.Command) != 1 {
		t.Errorf("hold = %+v\nwant hold %+v for alice with a's spec", held, want)
	}
}

// TestPoolFractionalCPUNeverDrifts holds and releases ten 0.1-cpu jobs on a
// 1-cpu node a thousand times: every round holds exactly ten, never the
// eleventh. (The pool does not bound attempts; RELEASE does.)
func TestPoolFractionalCPUNeverDrifts(t *testing.T) {
	t.Parallel()
	var h history
	p := newPool()
	applyAll(p, h.log(announce("n1", 1)))
	applyAll(p, h.log(tenths(11, "j")...))
	wantHeld := make([]string, 10)
	for round := 1; round <= 1000; round++ {
		for i := range wantHeld {
			wantHeld[i] = fmt.Sprintf("hold j%02d#%d on n1", i, round)
		}
		ds := p.Decide(100)
		if got := describe(ds); !slices.Equal(got, wantHeld) {
			t.Fatalf("round %d: Decide = %q\nwant %q", round, got, wantHeld)
		}
		applyAll(p, h.stored(ds))
		if more := p.Decide(100); len(more) != 0 {
			t.Fatalf("round %d: with the node full, Decide = %q, want nothing", round, describe(more))
		}
		for i := range 10 {
			applyAll(p, h.log(release(fmt.Sprintf("j%02d", i), round, "n1", 0.1, false)))
		}
	}
	// The last time, the ten end: the eleventh fits, and so does a whole-cpu job
	// after it, but not both.
	applyAll(p, h.log(submit("whole", 1)))
	ds := p.Decide(100)
	if len(ds) != 10 {
		t.Fatalf("last round: Decide = %q, want the ten again", describe(ds))
	}
	applyAll(p, h.stored(ds))
	for i := range 10 {
		applyAll(p, h.log(release(fmt.Sprintf("j%02d", i), 1001, "n1", 0.1, true)))
	}
	if got, want := describe(p.Decide(100)), []string{"hold j10#1 on n1"}; !slices.Equal(got, want) {
		t.Fatalf("after the final releases, Decide = %q, want %q", got, want)
	}
	applyAll(p, h.log(holdOf("j10", 1, "n1", 0.1), release("j10", 1, "n1", 0.1, true)))
	if got, want := describe(p.Decide(100)), []string{"hold whole#1 on n1"}; !slices.Equal(got, want) {
		t.Errorf("on the empty node, Decide = %q, want %q: capacity drifted", got, want)
	}
}

// TestPoolFreesCapacityFromAnOlderEventAppliedLate: RENT applies its own
// holds as soon as they are stored, so an event logged before one of them
// (here the release of another job) can reach the pool after it. It must
// still count. The service once skipped every event at or below the pool's
// last applied sequence, and a node stayed full for ever.
func TestPoolFreesCapacityFromAnOlderEventAppliedLate(t *testing.T) {
	t.Parallel()
	var h history
	p := newPool()
	applyAll(p, h.log(announce("n1", 1), announce("n2", 1), submit("a", 1)))
	applyAll(p, h.stored(p.Decide(100))) // a on n1 (by name)
	applyAll(p, h.log(submit("b", 1)))
	// Meanwhile RELEASE ends a, and c is submitted: the pool has not seen either.
	late := h.log(release("a", 1, "n1", 1, true), submit("c", 1))
	ds := p.Decide(100)
	if got, want := describe(ds), []string{"hold b#1 on n2"}; !slices.Equal(got, want) {
		t.Fatalf("Decide = %q, want %q", got, want)
	}
	own := h.stored(ds)
	applyAll(p, own)
	if p.Applied() != own[0].Seq {
		t.Fatalf("Applied = %d, want the pool's own hold #%d", p.Applied(), own[0].Seq)
	}
	applyAll(p, late)
	if got, want := describe(p.Decide(100)), []string{"hold c#1 on n1"}; !slices.Equal(got, want) {
		t.Errorf("after the late release, Decide = %q, want %q", got, want)
	}
}

func TestPoolWhy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		log      []step
		job      string
		state    string
		position int
		reason   []string // each must appear in the reason
	}{
		{
			name: "no nodes yet", log: []step{submit("a", 1)}, job: "a",
			state: hold.StateWaiting, position: 1, reason: []string{"no compute node has joined the pool yet"},
		},
		{
			name: "can never fit, naming the largest node",
			log:  []step{announce("n1", 2), announce("n2", 4), submit("a", 8, waitForNode)}, job: "a",
			state: hold.StateWaiting, position: 1,
			reason: []string{"needs 8 cpu, 1 GiB memory", "the largest node has 4 cpu, 16 GiB memory", "no node in the pool can hold it"},
		},
		{
			name: "next in line",
			log:  []step{announce("n1", 1), submit("x", 1), holdOf("x", 1, "n1", 1), submit("a", 1)}, job: "a",
			state: hold.StateWaiting, position: 1,
			reason: []string{"next in line", "needs 1 cpu, 1 GiB memory", "the node with the most free has 0 cpu, 15 GiB memory"},
		},
		{
			name: "position N",
			log: []step{announce("n1", 1), submit("x", 1), holdOf("x", 1, "n1", 1),
				submit("a", 1), submit("b", 1), submit("c", 0.5)}, job: "c",
			state: hold.StateWaiting, position: 3,
			reason: []string{"position 3 of 3 in the queue", "needs 0.5 cpu"},
		},
		{
			name: "held", log: []step{announce("n1", 1), submit("a", 1), holdOf("a", 1, "n1", 1)}, job: "a",
			state: hold.StateHeld, reason: []string{"compute is held on n1"},
		},
		{
			name: "cancel requested", log: []step{submit("a", 1), cancel("a")}, job: "a",
			state: hold.StateWaiting, position: 1, reason: []string{"cancel requested"},
		},
		{
			name: "over", log: []step{announce("n1", 1), submit("a", 1), holdOf("a", 1, "n1", 1), release("a", 1, "n1", 1, true)}, job: "a",
			state: "over", reason: []string{"it ended: succeeded"},
		},
		{
			name: "waiting for the jobs it runs after",
			log:  []step{submit("first", 1), submit("a", 1, after("first", "later"))}, job: "a",
			state: hold.StateWaiting, reason: []string{"first (waiting)", "later (not yet accepted)"},
		},
		{
			name: "never seen", log: []step{announce("n1", 1)}, job: "a",
			state: "unknown", reason: []string{"has not seen this job"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var h history
			p := newPool()
			applyAll(p, h.log(tt.log...))
			got := p.Why(tt.job)
			if got.Job != tt.job || got.State != tt.state || got.Position != tt.position {
				t.Errorf("Why(%s) = %+v, want state %q at position %d", tt.job, got, tt.state, tt.position)
			}
			for _, want := range tt.reason {
				if !strings.Contains(got.Reason, want) {
					t.Errorf("Why(%s).Reason = %q, want it to say %q", tt.job, got.Reason, want)
				}
			}
		})
	}
}
