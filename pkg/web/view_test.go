package web

import (
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// TestHistoryForTheCharts folds a job's life over two minutes and reads the
// last hour as the charts draw it.
func TestHistoryForTheCharts(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 12, 0, 5, 0, time.UTC)
	v := newView()
	seq := uint64(0)
	at := func(d time.Duration, subject string, ev events.Event) {
		seq++
		env := events.New(subject, ev, "test", t0.Add(d))
		env.Seq = seq
		v.apply(env, "")
	}
	evs := life("alice")
	at(0, "n1", &events.NodeAnnounced{Node: "n1", Boot: "b", CPU: 2, MemoryBytes: 1 << 30})
	at(time.Second, "j", evs[0])
	at(time.Second, "j", evs[1])
	v.sample()
	if m := v.minutes[0]; m.Waiting != 1 || m.CPU != 2 || m.Submitted != 1 {
		t.Fatalf("after the submission: %+v", m)
	}
	at(10*time.Second, "j", evs[2])
	at(11*time.Second, "j", evs[3])
	v.sample()
	for _, ev := range evs[4:] {
		at(70*time.Second, "j", ev)
	}
	v.sample()
	if len(v.minutes) != 2 {
		t.Fatalf("%d minutes, want 2: %+v", len(v.minutes), v.minutes)
	}
	if m := v.minutes[0]; m.CPUHeld != 1 || m.CPUHeldEnd != 1 || m.Finished != 0 {
		t.Errorf("the first minute: %+v", m)
	}
	if m := v.minutes[1]; m.Finished != 1 || m.CPUHeld != 1 || m.CPUHeldEnd != 0 {
		t.Errorf("the second minute: %+v", m)
	}
	h := hour(v.minutes, t0.Add(5*time.Minute))
	if len(h) != keepMinutes {
		t.Fatalf("the hour has %d minutes", len(h))
	}
	last := h[len(h)-1]
	if last.CPUHeld != 0 || last.CPU != 2 || last.Finished != 0 {
		t.Errorf("the last minute, with no event: %+v", last)
	}
	if got := h[len(h)-5]; got.Finished != 1 {
		t.Errorf("the minute of the release, 4 before now: %+v", got)
	}
	// A repeat at or below the last sequence changes nothing.
	env := events.New("j", evs[6], "test", t0.Add(80*time.Second))
	env.Seq = 3
	v.apply(env, "")
	if n := len(v.jobs["j"].Timeline); n != len(evs) {
		t.Errorf("a repeated sequence was folded in: %d events", n)
	}
}

// BenchmarkViewApply folds whole job lives into the view, sampling once per
// 64 events as a busy reading does: what following the log costs the page.
func BenchmarkViewApply(b *testing.B) {
	v := newView()
	evs := life("alice")
	t0 := time.Now()
	seq := uint64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		job := "job-" + itoa(i)
		for _, ev := range evs {
			seq++
			env := events.New(job, ev, "bench", t0.Add(time.Duration(seq)*time.Millisecond))
			env.Seq = seq
			v.apply(env, traceparent)
			if seq%64 == 0 {
				v.sample()
			}
		}
	}
	b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
}

// TestAStopFromANodeThatDoesNotHoldTheAttemptChangesNothing: mallory's
// stop of an attempt held on n1 is on the job's timeline, set aside, and
// the job runs on as n1 says.
func TestAStopFromANodeThatDoesNotHoldTheAttemptChangesNothing(t *testing.T) {
	t.Parallel()
	v := newView()
	evs := life("alice")
	forged := events.Hold{Attempt: 1, Node: "mallory", CPU: 1}
	for i, ev := range append(evs[:4:4], &events.RunStopped{Hold: forged, Outcome: events.Failed}) {
		env := events.New("j", ev, "test", time.Date(2026, 12, 3, 12, 0, i, 0, time.UTC))
		env.Seq = uint64(i + 1)
		v.apply(env, "")
	}
	j := v.jobs["j"]
	if j.State != "running" || j.Outcome != "" {
		t.Errorf("the job is %s (%s), want running as n1 said", j.State, j.Outcome)
	}
	if last := j.Timeline[len(j.Timeline)-1]; last.Seq != 5 || last.Detail != "set aside: from node mallory, which does not hold attempt 1" {
		t.Errorf("the timeline ends with %+v", last)
	}
}
