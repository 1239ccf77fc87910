package rent_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/rent"
)

// A meter the node cannot stretch: RENT ends an attempt whose node has not
// reported its stop by the hold's time plus the limit plus the grace.

// overrunGrace is RENT's grace in these tests.
const overrunGrace = 30 * time.Second

// stoppedStep is the node's RunStopped of an attempt held with holdOf().
func stoppedStep(job string, attempt int, node string, cpu float64) step {
	return step{job, &events.RunStopped{
		Hold:    events.Hold{Attempt: attempt, Node: node, CPU: cpu, MemoryBytes: gib, DiskBytes: 1 << 20},
		Outcome: events.Succeeded, Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}}}}
}

// expiredStep is RENT's HoldExpired of an attempt held with holdOf().
func expiredStep(job string, attempt int, node string, cpu float64) step {
	return step{job, &events.HoldExpired{
		Hold:   events.Hold{Attempt: attempt, Node: node, CPU: cpu, MemoryBytes: gib, DiskBytes: 1 << 20},
		Reason: "past its deadline"}}
}

func TestPoolEndsAnAttemptAtItsLimitPlusGrace(t *testing.T) {
	t.Parallel()
	// Every event happens at t0 (history.log); a job's limit is 60 s.
	deadline := t0.Add(time.Minute + overrunGrace)
	held := []step{announce("n1", 4), submit("a", 1), holdOf("a", 1, "n1", 1)}
	tests := []struct {
		name string
		log  []step
		at   time.Time
		want []string
	}{
		{name: "a quiet node's attempt goes on until its deadline", log: held, at: deadline.Add(-time.Nanosecond), want: []string{}},
		{name: "at its deadline RENT ends it", log: held, at: deadline, want: []string{"expire a#1 on n1"}},
		{name: "long after, once", log: held, at: deadline.Add(24 * time.Hour), want: []string{"expire a#1 on n1"}},
		{name: "a stop in the log before the deadline stands",
			log: append(slices.Clone(held), stoppedStep("a", 1, "n1", 1)), at: deadline.Add(time.Hour), want: []string{}},
		{name: "a loss in the log stands",
			log: append(slices.Clone(held), lost("a", 1, "n1", 1)), at: deadline.Add(time.Hour), want: []string{}},
		{name: "an attempt on a node whose lease lapsed is lost, not expired",
			log: append(slices.Clone(held), expire("n1")), at: deadline.Add(time.Hour), want: []string{"lose a#1 on n1"}},
		{name: "an attempt expired is not expired again",
			log: append(slices.Clone(held), expiredStep("a", 1, "n1", 1)), at: deadline.Add(time.Hour), want: []string{}},
		{name: "an attempt released is not expired",
			log: append(slices.Clone(held), expiredStep("a", 1, "n1", 1), ended("a", 1, "n1", 1, events.LimitExceeded, true)),
			at:  deadline.Add(time.Hour), want: []string{}},
		{name: "a cancel does not end the attempt: the node does, or the deadline",
			log: append(slices.Clone(held), cancel("a")), at: deadline, want: []string{"expire a#1 on n1"}},
		{name: "a job held again has the deadline of its new attempt",
			log: append(slices.Clone(held), lost("a", 1, "n1", 1), release("a", 1, "n1", 1, false), holdOf("a", 2, "n1", 1)),
			at:  deadline, want: []string{"expire a#2 on n1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			now := tt.at
			p := rent.NewPool(rent.PoolConfig{Grace: overrunGrace}, func() time.Time { return now })
			var h history
			applyAll(p, h.log(tt.log...))
			got := describeExpired(p.Decide(100))
			if !slices.Equal(got, tt.want) {
				t.Errorf("decided %q, want %q", got, tt.want)
			}
		})
	}
}

// describeExpired is describe, naming HoldExpired.
func describeExpired(ds []rent.Decision) []string {
	out := describe(ds)
	for i, d := range ds {
		if e, ok := d.Event.(*events.HoldExpired); ok {
			out[i] = "expire " + d.Job + "#" + string(rune('0'+e.Attempt)) + " on " + e.Node
		}
	}
	return out
}

// TestPoolDeadlineIsTheLogs: the deadline is read from the log (the hold's
// ce-time, the spec's limit), not from when a pool saw the hold: a pool
// rebuilt from the log later, as a standby that takes over is, decides the
// same, with the deadline in the event, and NextDue says when to look.
func TestPoolDeadlineIsTheLogs(t *testing.T) {
	t.Parallel()
	var h history
	envs := h.log(announce("n1", 4), submit("a", 1), submit("b", 1, limit(time.Hour)),
		holdOf("a", 1, "n1", 1), holdOf("b", 1, "n1", 1))
	now := t0
	first := rent.NewPool(rent.PoolConfig{Grace: overrunGrace}, func() time.Time { return now })
	applyAll(first, envs)
	if due := first.NextDue(); !due.Equal(t0.Add(time.Minute + overrunGrace)) {
		t.Errorf("next due %s, want a's: t0 + 60 s + grace", due)
	}
	now = t0.Add(2 * time.Hour)
	standby := rent.NewPool(rent.PoolConfig{Grace: overrunGrace}, func() time.Time { return now })
	applyAll(standby, envs)
	for _, p := range []*rent.Pool{first, standby} {
		ds := p.Decide(100)
		if got := describeExpired(ds); !slices.Equal(got, []string{"expire a#1 on n1", "expire b#1 on n1"}) {
			t.Fatalf("decided %q", got)
		}
		e := ds[0].Event.(*events.HoldExpired)
		if !e.Deadline.Equal(t0.Add(time.Minute+overrunGrace)) || !strings.Contains(e.Reason, "had not reported the stop") {
			t.Errorf("HoldExpired %+v", e)
		}
	}
	applyAll(standby, h.stored(standby.Decide(100)))
	if due := standby.NextDue(); !due.IsZero() {
		t.Errorf("next due %s once both expired, want none", due)
	}
}

// TestLeaderEndsAQuietNodesAttempt: RENT, leading, with its clock moved
// past the deadline, appends HoldExpired; a standby that takes over after
// the leader died before it could (its clock past the deadline too)
// appends it once, and the log refuses a second.
func TestLeaderEndsAQuietNodesAttempt(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 15*time.Second)
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	move := func(to time.Time) { mu.Lock(); defer mu.Unlock(); now = to }
	cfg := rent.Config{Instance: "rent-1", Logger: quiet, Now: clock, Pool: rent.PoolConfig{Grace: overrunGrace}}
	leader, err := rent.New(srv.Conn(t), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/test", clock), rent: leader}
	f.resign = leader.Lead(t, ctx)
	node := f.append(t, announce("n1", 2))
	sub := f.append(t, submit("job-1", 1))
	f.handle(t, leader, node)
	f.handle(t, leader, sub)
	if len(f.holds(t, "job-1")) != 1 {
		t.Fatal("job-1 was not held")
	}
	expiredOf := func() []*events.HoldExpired {
		evs, err := bus.ReadJob(ctx, js, "job-1", 1)
		if err != nil {
			t.Fatal(err)
		}
		var out []*events.HoldExpired
		for _, e := range evs {
			if x, ok := e.Event.(*events.HoldExpired); ok {
				out = append(out, x)
			}
		}
		return out
	}
	move(t0.Add(time.Minute + overrunGrace - time.Second))
	if err := leader.Schedule(ctx); err != nil {
		t.Fatal(err)
	}
	if got := expiredOf(); len(got) != 0 {
		t.Fatalf("expired a second before its deadline: %+v", got)
	}

	// The leader dies; a standby rebuilt from the log takes over.
	f.resign()
	cfg.Instance = "rent-2"
	standby, err := rent.New(nil, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	resignStandby := standby.Lead(t, ctx)
	evs, err := bus.ReadJob(ctx, js, "job-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	f.handle(t, standby, node)
	for _, e := range evs {
		f.handle(t, standby, e)
	}
	move(t0.Add(time.Minute + overrunGrace))
	if err := standby.Schedule(ctx); err != nil {
		t.Fatal(err)
	}
	got := expiredOf()
	if len(got) != 1 || got[0].Attempt != 1 || got[0].Node != "n1" {
		t.Fatalf("HoldExpired %+v, want one for attempt 1 on n1", got)
	}
	// The old leader, back with a pool that has not seen it, is refused.
	resignStandby()
	f.resign = leader.Lead(t, ctx)
	if err := leader.Schedule(ctx); err != nil {
		t.Fatal(err)
	}
	if got := expiredOf(); len(got) != 1 {
		t.Errorf("%d HoldExpired after the old leader decided again, want 1", len(got))
	}
}

// TestPoolForgetsTheDeadlinesOfAttemptsThatEnded: an attempt stopped,
// lost or released no longer counts towards a deadline.
func TestPoolForgetsTheDeadlinesOfAttemptsThatEnded(t *testing.T) {
	t.Parallel()
	var h history
	p := rent.NewPool(rent.PoolConfig{Grace: overrunGrace}, func() time.Time { return t0 })
	applyAll(p, h.log(announce("n1", 4), submit("a", 1), submit("b", 1, limit(time.Hour)), submit("c", 1, limit(2*time.Hour)),
		holdOf("a", 1, "n1", 1), holdOf("b", 1, "n1", 1), holdOf("c", 1, "n1", 1)))
	due := func(d time.Duration) time.Time { return t0.Add(d + overrunGrace) }
	for _, tt := range []struct {
		then step
		want time.Time
	}{
		{stoppedStep("a", 1, "n1", 1), due(time.Hour)},
		{lost("b", 1, "n1", 1), due(2 * time.Hour)},
		{ended("c", 1, "n1", 1, events.Cancelled, true), time.Time{}},
	} {
		applyAll(p, h.log(tt.then))
		if got := p.NextDue(); !got.Equal(tt.want) {
			t.Errorf("after %T of %s: next due %s, want %s", tt.then.ev, tt.then.subject, got, tt.want)
		}
	}
}
