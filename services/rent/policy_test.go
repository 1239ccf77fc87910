package rent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// world builds a pool from events, as the log would, with a clock the test
// moves.
type world struct {
	t    *testing.T
	p    *Pool
	seq  uint64
	now  time.Time
	held map[string]events.ComputeHeld
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), held: map[string]events.ComputeHeld{}}
	w.p = NewPool(PoolConfig{Grace: 10 * time.Second}, func() time.Time { return w.now })
	return w
}

func (w *world) apply(subject string, ev events.Event) {
	w.seq++
	env := events.New(subject, ev, "test", w.now)
	env.Seq = w.seq
	w.p.Apply(env)
}

func (w *world) node(name string, cpu float64) {
	w.apply(name, &events.NodeAnnounced{Node: name, Boot: "b1", CPU: cpu, MemoryBytes: 64 << 30, DiskBytes: 1 << 40})
}

type jobOpt func(*events.JobSpec)

func prio(n int) jobOpt { return func(s *events.JobSpec) { s.Priority = n } }
func limit(d time.Duration) jobOpt {
	return func(s *events.JobSpec) { s.Request.LimitSeconds = d.Seconds() }
}

func (w *world) submit(id, submitter string, cpu float64, opts ...jobOpt) {
	spec := events.JobSpec{Work: events.Work{Command: []string{"x"}},
		Request: events.Request{CPU: cpu, MemoryBytes: 1 << 20, DiskBytes: 1 << 20, LimitSeconds: 3600}}
	for _, o := range opts {
		o(&spec)
	}
	w.apply(id, &events.JobSubmitted{Submitter: submitter, Spec: spec})
}

// decide applies every decision, as the service does once it is stored,
// and returns the holds in order as "job@node".
func (w *world) decide() []string {
	var holds []string
	for _, d := range w.p.Decide(1000) {
		w.apply(d.Job, d.Event)
		if h, ok := d.Event.(*events.ComputeHeld); ok {
			holds = append(holds, d.Job+"@"+h.Node)
			w.held[d.Job] = *h
		}
	}
	return holds
}

func (w *world) release(id string) {
	h := w.held[id]
	w.apply(id, &events.ComputeReleased{Hold: h.Hold, Outcome: events.Succeeded, Final: true})
}

func TestHigherPriorityIsHeldFirst(t *testing.T) {
	w := newWorld(t)
	w.submit("low", "a", 1)
	w.submit("high", "a", 1, prio(5))
	w.submit("mid", "a", 1, prio(1))
	w.node("n1", 1)
	if got := w.decide(); strings.Join(got, " ") != "high@n1" {
		t.Fatalf("held %v, want the highest priority first", got)
	}
	w.release("high")
	if got := w.decide(); strings.Join(got, " ") != "mid@n1" {
		t.Fatalf("held %v, want mid next", got)
	}
}

// TestOneSubmittersFloodDoesNotShutOutAnother is fair share: bob's one job
// is held as soon as capacity frees, ahead of alice's many earlier ones.
func TestOneSubmittersFloodDoesNotShutOutAnother(t *testing.T) {
	w := newWorld(t)
	w.node("n1", 2)
	for i := range 1000 {
		w.submit(fmt.Sprintf("alice-%d", i), "alice", 1)
	}
	w.submit("bob-0", "bob", 1)
	got := w.decide()
	if len(got) != 2 || !strings.HasPrefix(got[0], "alice-0") {
		t.Fatalf("held %v, want alice-0 and then bob-0 (bob holds nothing)", got)
	}
	if !strings.HasPrefix(got[1], "bob-0") {
		t.Fatalf("second hold %s, want bob's only job: alice already holds a cpu", got[1])
	}
}

// TestBackfillNeverDelaysTheReservedJob: a big job waits for the node to
// drain; a short small job may start now, a long small one may not.
func TestBackfillNeverDelaysTheReservedJob(t *testing.T) {
	w := newWorld(t)
	w.node("n1", 4)
	w.submit("running", "a", 3, limit(10*time.Minute))
	if got := w.decide(); len(got) != 1 {
		t.Fatalf("held %v", got)
	}
	// big needs the whole node: it can start when running ends, in 10m+grace.
	// One submitter, so that fair share does not reorder them.
	w.submit("big", "a", 4, limit(time.Hour))
	w.submit("long-small", "a", 1, limit(time.Hour))
	w.submit("short-small", "a", 1, limit(5*time.Minute))
	got := w.decide()
	if strings.Join(got, " ") != "short-small@n1" {
		t.Fatalf("held %v, want only short-small: it ends before big can start, long-small would delay it", got)
	}
	// Once running ends, big is held first, ahead of long-small.
	w.now = w.now.Add(6 * time.Minute)
	w.release("short-small")
	w.release("running")
	if got := w.decide(); len(got) == 0 || got[0] != "big@n1" {
		t.Fatalf("held %v, want big first when the node drained", got)
	}
}

func TestBackfillUsesOtherNodesFreely(t *testing.T) {
	w := newWorld(t)
	w.node("n1", 4)
	w.node("n2", 1)
	w.submit("running", "a", 4, limit(10*time.Minute))
	w.decide()
	w.submit("big", "a", 4, limit(time.Hour))
	w.submit("long-small", "a", 1, limit(time.Hour))
	got := w.decide()
	if strings.Join(got, " ") != "long-small@n2" {
		t.Fatalf("held %v, want long-small on n2: it cannot delay big, which waits for n1", got)
	}
}

func TestNeverHeldBeyondCapacity(t *testing.T) {
	w := newWorld(t)
	w.node("n1", 1)
	w.node("n2", 1.5)
	for i := range 60 {
		w.submit(fmt.Sprintf("j%d", i), fmt.Sprintf("s%d", i%3), 0.1)
	}
	for round := range 30 {
		w.decide()
		used := map[string]float64{}
		for id, h := range w.held {
			if _, over := w.p.over.get(id); !over {
				used[h.Node] += h.CPU
			}
		}
		if used["n1"] > 1+1e-9 || used["n2"] > 1.5+1e-9 {
			t.Fatalf("round %d: held %v, beyond capacity", round, used)
		}
		for id := range w.held {
			if _, over := w.p.over.get(id); !over {
				w.release(id)
				break
			}
		}
	}
}

func TestWhySaysWhatAJobWaitsFor(t *testing.T) {
	w := newWorld(t)
	w.submit("early", "a", 1)
	if r := w.p.Why("early"); !strings.Contains(r.Reason, "no compute node has joined") {
		t.Errorf("with no nodes: %q", r.Reason)
	}
	w.node("n1", 2)
	w.decide() // early holds one of the two cpu
	w.submit("next", "a", 2)
	w.submit("later", "a", 2)
	if r := w.p.Why("next"); r.Position != 1 || !strings.Contains(r.Reason, "next in line") || !strings.Contains(r.Reason, "1 cpu") {
		t.Errorf("next: position %d, %q; want next in line, naming the 1 cpu free", r.Position, r.Reason)
	}
	if r := w.p.Why("later"); r.Position != 2 || !strings.Contains(r.Reason, "position 2") {
		t.Errorf("later: position %d, %q", r.Position, r.Reason)
	}
	w.apply("dep-child", &events.JobSubmitted{Submitter: "a", Spec: events.JobSpec{After: []string{"next"},
		Request: events.Request{CPU: 1, MemoryBytes: 1 << 20, LimitSeconds: 60}}})
	if r := w.p.Why("dep-child"); !strings.Contains(r.Reason, "next (waiting)") {
		t.Errorf("dependent: %q", r.Reason)
	}
}

func TestALostNodesHoldsAreLostOnce(t *testing.T) {
	w := newWorld(t)
	w.node("n1", 2)
	w.submit("a", "s", 1)
	w.submit("b", "s", 1)
	w.decide()
	// b stopped before the node was lost: its own events finish it.
	w.apply("b", &events.RunStopped{Hold: w.held["b"].Hold, Outcome: events.Succeeded})
	w.apply("n1", &events.NodeExpired{Node: "n1", Boot: "b1"})
	var lost []string
	for _, d := range w.p.Decide(10) {
		if _, ok := d.Event.(*events.HoldLost); ok {
			lost = append(lost, d.Job)
			w.apply(d.Job, d.Event)
		}
	}
	if strings.Join(lost, ",") != "a" {
		t.Fatalf("lost %v, want only a (b had stopped)", lost)
	}
	for _, d := range w.p.Decide(10) {
		if _, ok := d.Event.(*events.HoldLost); ok {
			t.Fatalf("HoldLost for %s decided twice", d.Job)
		}
	}
	// Released as not final: held again, as attempt 2, once a node is back.
	w.apply("a", &events.ComputeReleased{Hold: w.held["a"].Hold, Outcome: events.NodeLost, Final: false})
	w.apply("n1", &events.NodeAnnounced{Node: "n1", Boot: "b2", CPU: 2, MemoryBytes: 64 << 30, DiskBytes: 1 << 40})
	w.decide()
	if h := w.held["a"]; h.Attempt != 2 {
		t.Errorf("a's next hold is attempt %d, want 2", h.Attempt)
	}
}

// A submitter asking why its job waits learns nothing of other tenants:
// not how many jobs are ahead or waiting, not how busy the nodes are, not
// whether another's job exists.
func TestWhyTellsASubmitterNothingOfOthers(t *testing.T) {
	w := newWorld(t)
	w.node("n1", 2)
	w.submit("bobs-1", "bob", 2)
	w.decide()
	w.submit("bobs-2", "bob", 2)
	w.submit("alices", "alice", 2)
	r := w.p.WhyFor("alices", "alice", false)
	if r.State != "waiting" || r.Position != 0 || r.Queued != 0 || strings.Contains(r.Reason, "position") || strings.Contains(r.Reason, "in all") {
		t.Errorf("alice is told %+v", r)
	}
	if !strings.Contains(r.Reason, "2 cpu") {
		t.Errorf("alice is not told what her job needs: %q", r.Reason)
	}
	for _, id := range []string{"bobs-1", "bobs-2", "nobody"} {
		if got, want := w.p.WhyFor(id, "alice", false), w.p.WhyFor("nobody", "alice", false); got.State != want.State || got.Reason != want.Reason {
			t.Errorf("alice asking about %s is told %+v; about a job that does not exist, %+v", id, got, want)
		}
	}
	if r := w.p.WhyFor("alices", "operator", true); r.Position != 2 || r.Queued != 2 {
		t.Errorf("the operator is told %+v; want position 2 of 2", r)
	}
}

// TestPoolsFromOneLogReserveAlike: jobs past their end all end "now", and
// the reservation of the job that waits for them must not depend on the
// order a node's map gives them in, or two RENTs built from the same log
// would allow different backfill.
func TestPoolsFromOneLogReserveAlike(t *testing.T) {
	for i := range 50 {
		w := newWorld(t)
		w.node("n1", 4)
		w.submit("a", "s", 1, limit(time.Minute))
		w.submit("b", "s", 2, limit(time.Minute))
		if got := w.decide(); len(got) != 2 {
			t.Fatalf("held %v, want a and b", got)
		}
		// Both are past their limit and grace: the node frees 3 cores
		// "now", in submission order: a's 1 (2 free, big does not fit yet),
		// then b's 2 (4 free: big fits, 1 to spare for small).
		w.now = w.now.Add(2 * time.Minute)
		w.submit("big", "s", 3, limit(time.Hour))
		w.submit("small", "s", 1, limit(time.Hour))
		if got := strings.Join(w.decide(), " "); got != "small@n1" {
			t.Fatalf("pool #%d held %q, want small@n1: the core big leaves spare is small's", i, got)
		}
	}
}
