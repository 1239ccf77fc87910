package submit

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
)

func TestQueueCountsWhatCameBeforeARequest(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	req := func(seq uint64, job, who string) events.Envelope {
		return events.Envelope{Seq: seq, Subject: job, Event: &events.JobRequested{Submitter: who}}
	}
	ev := func(seq uint64, job string, e events.Event, at time.Time) events.Envelope {
		return events.Envelope{Seq: seq, Subject: job, Event: e, Time: at}
	}
	log := []events.Envelope{
		req(1, "a1", "alice"),
		ev(2, "a1", &events.JobSubmitted{Submitter: "alice"}, t0),
		req(3, "b1", "bob"),
		req(4, "a2", "alice"),
		req(5, "a3", "alice"),
		ev(6, "a2", &events.JobRejected{Reason: "bad"}, t0),
		req(7, "a4", "alice"),
		ev(8, "a1", &events.ComputeReleased{Final: true}, t0.Add(time.Second)),
		req(9, "a4", "alice"), // a second request under a used id: no new job
	}
	for _, tc := range []struct {
		name string
		seq  uint64
		at   time.Time
		want limits.Usage
	}{
		// a1 ended, a2 rejected; a3 (undecided) came before a4.
		{"a4 now", 7, t0.Add(2 * time.Second), limits.Usage{Queued: 1, Recent: 2}},
		// a4 itself, and a3, come before a later request.
		{"after a4", 10, t0.Add(2 * time.Second), limits.Usage{Queued: 2, Recent: 3}},
		// Nothing before the first request, once its own admission is
		// a minute old.
		{"a1", 1, t0.Add(time.Minute), limits.Usage{}},
		// a1's admission is forgotten a minute later; undecided ones count.
		{"a minute on", 10, t0.Add(time.Minute), limits.Usage{Queued: 2, Recent: 2}},
	} {
		q := NewQueue()
		for range 2 { // applied twice: once
			for _, e := range log {
				q.Apply(e)
			}
		}
		if got := q.Usage("alice", tc.seq, tc.at); got != tc.want {
			t.Errorf("%s: Usage = %+v, want %+v", tc.name, got, tc.want)
		}
		if got := q.Usage("bob", 100, tc.at); got != (limits.Usage{Queued: 1, Recent: 1}) {
			t.Errorf("%s: bob's Usage = %+v", tc.name, got)
		}
	}
}

func TestQueueForgetsEndedJobs(t *testing.T) {
	t.Parallel()
	q := NewQueue()
	t0 := time.Now()
	for i := range 1000 {
		job := events.Envelope{Subject: "j" + string(rune('a'+i%26)) + time.Duration(i).String()}
		q.Apply(events.Envelope{Seq: uint64(3*i + 1), Subject: job.Subject, Event: &events.JobRequested{Submitter: "alice"}})
		q.Apply(events.Envelope{Seq: uint64(3*i + 2), Subject: job.Subject, Event: &events.JobSubmitted{Submitter: "alice"}, Time: t0})
		q.Apply(events.Envelope{Seq: uint64(3*i + 3), Subject: job.Subject, Event: &events.JobCancelled{}})
	}
	if u := q.Usage("alice", 1<<40, t0.Add(2*time.Minute)); u != (limits.Usage{}) {
		t.Fatalf("Usage after every job ended = %+v", u)
	}
	if len(q.jobs) != 0 || len(q.by) != 0 {
		t.Fatalf("the queue keeps %d jobs and %d submitters after they ended", len(q.jobs), len(q.by))
	}
}

// TestQueueMemoryPerLiveJob: the queue keeps a few hundred bytes per live
// job (SUBMIT is bounded at 256 MiB with 100,000 jobs queued in the e2e
// burst).
func TestQueueMemoryPerLiveJob(t *testing.T) {
	const n = 100_000
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("burst-%08d", i)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	q := NewQueue()
	t0 := time.Now()
	for i, job := range jobs {
		q.Apply(events.Envelope{Seq: uint64(2*i + 1), Subject: job, Event: &events.JobRequested{Submitter: "alice"}})
		q.Apply(events.Envelope{Seq: uint64(2*i + 2), Subject: job, Event: &events.JobSubmitted{Submitter: "alice"}, Time: t0})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perJob := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("queue: %d bytes per live job", perJob)
	if perJob > 512 {
		t.Errorf("the queue keeps %d bytes per live job, want at most 512", perJob)
	}
	if u := q.Usage("alice", 2*n+1, t0); u.Queued != n || u.Recent != n {
		t.Fatalf("Usage = %+v", u)
	}
	runtime.KeepAlive(q)
}
