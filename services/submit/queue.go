package submit

import (
	"slices"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
)

// window is how far back max-rate counts submissions.
const window = time.Minute

// Queue is SUBMIT's projection of the log for quotas: each submitter's
// open jobs (asked for or submitted, and not over) in log order, and the
// times of its recent submissions. It holds live jobs and the last
// minute's submissions, nothing else, so its memory is bounded by them.
//
// The quota of a request at sequence S counts what came before S only, so
// that two requests decided at once cannot each count the other and both
// be refused; and it counts a request not yet decided as a job, so that
// two decided at once cannot both be admitted past a limit. Whatever
// instance or lane decides, a submitter never has more jobs admitted than
// its limits allow. It is not safe for concurrent use.
type Queue struct {
	applied uint64
	jobs    map[string]*openJob
	by      map[string]*tenant
}

type openJob struct {
	submitter string
	seq       uint64
	decided   bool
}

// tenant is one submitter's part of the queue.
type tenant struct {
	// open and undecided are sequences of requests, ascending: every open
	// job, and those not yet decided.
	open, undecided []uint64
	// recent are the times SUBMIT admitted its jobs (JobSubmitted's
	// ce-time, written by SUBMIT and so not the submitter's to choose).
	recent []time.Time
}

// NewQueue returns an empty Queue.
func NewQueue() *Queue {
	return &Queue{jobs: map[string]*openJob{}, by: map[string]*tenant{}}
}

// Applied is the last stream sequence applied.
func (q *Queue) Applied() uint64 { return q.applied }

// Through records that the log was read through seq (events that do not
// decode, or are not about jobs, change nothing but that).
func (q *Queue) Through(seq uint64) { q.applied = max(q.applied, seq) }

// Apply folds in one event. An event at or before Applied changes nothing:
// applying the log twice is applying it once.
func (q *Queue) Apply(env events.Envelope) {
	if env.Seq != 0 && env.Seq <= q.applied {
		return
	}
	q.applied = max(q.applied, env.Seq)
	job := env.Subject
	switch ev := env.Event.(type) {
	case *events.JobRequested:
		if _, ok := q.jobs[job]; ok || ev.Submitter == "" {
			return // a second request for a job: SUBMIT refuses it
		}
		q.jobs[job] = &openJob{submitter: ev.Submitter, seq: env.Seq}
		t := q.tenant(ev.Submitter)
		t.open = append(t.open, env.Seq)
		t.undecided = append(t.undecided, env.Seq)
	case *events.JobSubmitted:
		j := q.jobs[job]
		if j == nil || j.decided {
			return
		}
		j.decided = true
		t := q.by[j.submitter]
		t.undecided = remove(t.undecided, j.seq)
		t.recent = append(t.recent, env.Time)
	default:
		if events.Terminal(env.Event) {
			q.end(job)
		}
	}
}

// end forgets an open job.
func (q *Queue) end(job string) {
	j := q.jobs[job]
	if j == nil {
		return
	}
	delete(q.jobs, job)
	t := q.by[j.submitter]
	t.open = remove(t.open, j.seq)
	if !j.decided {
		t.undecided = remove(t.undecided, j.seq)
	}
	if len(t.open) == 0 && len(t.recent) == 0 {
		delete(q.by, j.submitter)
	}
}

func (q *Queue) tenant(submitter string) *tenant {
	t := q.by[submitter]
	if t == nil {
		t = &tenant{}
		q.by[submitter] = t
	}
	return t
}

// Usage is what submitter had before the request at sequence seq, at time
// now: its open jobs and its submissions in the minute before now (those
// admitted, and those asked for and not yet decided, which may be
// admitted now). Submissions older than the minute are forgotten.
func (q *Queue) Usage(submitter string, seq uint64, now time.Time) limits.Usage {
	t := q.by[submitter]
	if t == nil {
		return limits.Usage{}
	}
	// Admissions are appended in about the order of their times (one
	// clock per instance): forgetting from the front is enough.
	since := now.Add(-window)
	for len(t.recent) > 0 && !t.recent[0].After(since) {
		t.recent = t.recent[1:]
	}
	if len(t.open) == 0 && len(t.recent) == 0 {
		delete(q.by, submitter)
	}
	undecided := before(t.undecided, seq)
	return limits.Usage{Queued: before(t.open, seq), Recent: len(t.recent) + undecided}
}

// before counts the sequences in s (ascending) below seq.
func before(s []uint64, seq uint64) int {
	i, _ := slices.BinarySearch(s, seq)
	return i
}

// remove takes seq out of s (ascending). Jobs end roughly in the order they
// came, so it moves the shorter side: near the front, the front.
func remove(s []uint64, seq uint64) []uint64 {
	i, ok := slices.BinarySearch(s, seq)
	if !ok {
		return s
	}
	if i < len(s)/2 {
		copy(s[1:i+1], s[:i])
		return s[1:]
	}
	return slices.Delete(s, i, i+1)
}
