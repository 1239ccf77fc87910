package rent_test

import (
	"fmt"
	"runtime"
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

// TestPoolKeepsLittleOfEachEndedJob: what the pool remembers of an ended
// job, read from the log as RENT reads it, is its id and outcome, not the
// buffers they were decoded from: a hundred thousand remembered jobs cost
// a few MiB. Not parallel: it measures the heap.
func TestPoolKeepsLittleOfEachEndedJob(t *testing.T) {
	const jobs = 4000
	decoded := func(env events.Envelope) events.Envelope {
		t.Helper()
		m, err := env.Msg()
		if err != nil {
			t.Fatal(err)
		}
		got, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		got.Seq = env.Seq
		return got
	}
	p := rent.NewPool(rent.PoolConfig{}, func() time.Time { return t0 })
	var h history
	applyAll(p, h.log(announce("n1", 4)))
	// The decoder's tables, made once, are not the pool's.
	decoded(h.log(release("warm", 1, "n1", 1, true))[0])
	decoded(h.log(submit("warm", 1))[0])
	before := liveHeap()
	for i := range jobs {
		id := fmt.Sprintf("job-%d", i)
		p.Apply(decoded(h.log(submit(id, 1))[0]))
		for _, env := range h.stored(p.Decide(8)) {
			p.Apply(decoded(env))
		}
		p.Apply(decoded(h.log(release(id, 1, "n1", 1, true))[0]))
		h.envs = h.envs[:0:0] // only the pool keeps anything
	}
	after := liveHeap()
	if all, live := p.Tracked(); all != jobs || live != 0 {
		t.Fatalf("the pool keeps %d jobs, %d live; want %d ended", all, live, jobs)
	}
	if per := (after - before) / jobs; per > 300 {
		t.Errorf("each ended job costs %d bytes of heap, want at most 300: more than its id and outcome", per)
	}
	runtime.KeepAlive(p)
}

// TestPoolHeapIsFlatOnceItForgets: once the pool remembers all the ended
// jobs it may, ten times as many more ending cost no more heap. A Go map
// keeps the room of the entries deleted from it, and one that always has
// as many entries as it forgets grows to twice its size. Not parallel: it
// measures the heap.
func TestPoolHeapIsFlatOnceItForgets(t *testing.T) {
	const remember = rent.DefaultRememberEnded
	p := rent.NewPool(rent.PoolConfig{RememberEnded: remember}, func() time.Time { return t0 })
	var h history
	applyAll(p, h.log(announce("n1", 4)))
	ids := make([]string, 3*remember)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08d-0000-7000-8000-000000000000", i)
	}
	run := func(ids []string) {
		for _, id := range ids {
			applyAll(p, h.log(submit(id, 1)))
			applyAll(p, h.stored(p.Decide(8)))
			applyAll(p, h.log(release(id, 1, "n1", 1, true)))
			h.envs = h.envs[:0:0]
		}
	}
	before := liveHeap()
	run(ids[:remember])
	full := liveHeap() - before
	run(ids[remember:])
	after := liveHeap() - before
	if all, live := p.Tracked(); all != remember || live != 0 {
		t.Fatalf("the pool keeps %d jobs, %d live; want %d ended", all, live, remember)
	}
	t.Logf("heap %d KiB after %d jobs, %d KiB after %d", full>>10, remember, after>>10, len(ids))
	if after > full*13/10 {
		t.Errorf("the pool's heap is %d KiB after %d jobs ended, %d KiB after %d: it grows with the jobs it forgot", after>>10, len(ids), full>>10, remember)
	}
	runtime.KeepAlive(p)
	runtime.KeepAlive(ids)
}

// liveHeap is the heap in use once what is dead is collected.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestAQueuedJobTakesLittle: a hundred thousand jobs may wait, so what the
// pool keeps of each waiting one is bounded: 789 B here, with the strings
// and slices of the submission these tests make (in `e31 bench scheduler`,
// 582 B, which is not to grow). A field added to every job moved it up a
// size class (821 B, 614 in the bench); what few jobs have belongs in a
// map of the pool (liveEarly).
func TestAQueuedJobTakesLittle(t *testing.T) {
	const n = 50_000
	p := rent.NewPool(rent.PoolConfig{}, func() time.Time { return t0 })
	var h history
	applyAll(p, h.log(announce("n1", 1)))
	before := liveHeap()
	for i := range n {
		// Each in its place in the log, after the node's announcement; the
		// history keeps none of them.
		env := h.log(submit(fmt.Sprintf("%08d-0000-7000-8000-000000000000", i), 2))[0]
		env.Seq = uint64(2 + i)
		p.Apply(env)
		h.envs = h.envs[:0:0]
	}
	per := (liveHeap() - before) / n
	if _, live := p.Tracked(); live != n {
		t.Fatalf("%d jobs live, want %d queued", live, n)
	}
	t.Logf("%d B a queued job", per)
	if per > 800 {
		t.Errorf("the pool keeps %d B of each queued job, want at most 800", per)
	}
	runtime.KeepAlive(p)
}
