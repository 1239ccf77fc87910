package rent

import (
	"container/heap"
	"fmt"
	"sort"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// A meter the node cannot stretch: the meter of an attempt runs from its
// ComputeHeld until RELEASE releases it, and the node decides when that
// is by reporting its stop. A node that never reports would keep the
// submitter paying and its share of the node held for ever. So RENT ends
// an attempt at the latest at its deadline, its hold's ce-time plus the
// job's limit plus PoolConfig.Grace, whatever the node says: if neither a
// stop nor a loss of the attempt is in the log by then, the leader
// appends HoldExpired, which RELEASE releases as limit_exceeded, for
// good, and after which the node's stop is set aside by everyone.
//
// The deadline is read from the log (the hold's ce-time, the spec's
// limit), so a pool rebuilt from the log, on any instance, after any
// leader change, knows it; only the leader appends, and the decision
// expects the job's last sequence, so a stop stored first wins and
// HoldExpired is never appended after one. Time is the pool's clock,
// which tests set.

// meter keeps the attempts placed and not yet stopped, lost or expired,
// earliest deadline first.
type meter struct {
	grace time.Duration
	due   dueHeap
}

// deadline is when j's current attempt must have stopped.
func (m *meter) deadline(j *job) time.Time { return j.heldAt.Add(j.limit + m.grace) }

// dueHeap holds the jobs whose current attempt is held and has not
// stopped, been lost or expired, earliest deadline first. A job's due is
// its index in it plus one, 0 when it is not in it.
type dueHeap struct {
	jobs []*job
}

func (h *dueHeap) Len() int { return len(h.jobs) }
func (h *dueHeap) Less(a, b int) bool {
	// Deadlines differ by limit and hold time only: grace is the same.
	da, db := h.jobs[a].heldAt.Add(h.jobs[a].limit), h.jobs[b].heldAt.Add(h.jobs[b].limit)
	if !da.Equal(db) {
		return da.Before(db)
	}
	return h.jobs[a].order < h.jobs[b].order
}
func (h *dueHeap) Swap(a, b int) {
	h.jobs[a], h.jobs[b] = h.jobs[b], h.jobs[a]
	h.jobs[a].due, h.jobs[b].due = int32(a+1), int32(b+1)
}
func (h *dueHeap) Push(x any) {
	j := x.(*job)
	j.due = int32(len(h.jobs) + 1)
	h.jobs = append(h.jobs, j)
}
func (h *dueHeap) Pop() any {
	j := h.jobs[len(h.jobs)-1]
	h.jobs[len(h.jobs)-1] = nil
	h.jobs = h.jobs[:len(h.jobs)-1]
	j.due = 0
	return j
}

// watch starts counting j's current attempt towards its deadline.
func (m *meter) watch(j *job) {
	m.unwatch(j)
	heap.Push(&m.due, j)
}

// unwatch stops counting j: its attempt stopped, was lost or expired, or
// it ended.
func (m *meter) unwatch(j *job) {
	if j.due > 0 {
		heap.Remove(&m.due, int(j.due)-1)
	}
}

// next is the earliest deadline of an attempt placed and not stopped;
// zero if there is none.
func (m *meter) next() time.Time {
	if len(m.due.jobs) == 0 {
		return time.Time{}
	}
	return m.deadline(m.due.jobs[0])
}

// NextDue is the earliest deadline of an attempt placed and not stopped;
// zero if there is none. The leader decides again then.
func (p *Pool) NextDue() time.Time { return p.meter.next() }

// overruns decides HoldExpired for every attempt past its deadline at now,
// in submission order. An attempt on a node whose lease lapsed is left to
// HoldLost, which the same pass decides.
func (m *meter) overruns(now time.Time, nodes *nodeSet) []Decision {
	var late []*job
	var walk func(i int)
	walk = func(i int) {
		// A heap: the children of an attempt not yet due are not due.
		if i >= len(m.due.jobs) || m.deadline(m.due.jobs[i]).After(now) {
			return
		}
		late = append(late, m.due.jobs[i])
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	sort.Slice(late, func(a, b int) bool { return late[a].order < late[b].order })
	var out []Decision
	for _, j := range late {
		n := nodes.all[j.node]
		if n != nil && n.expired {
			continue
		}
		at := m.deadline(j)
		out = append(out, Decision{Job: j.id, Expect: j.last, Event: &events.HoldExpired{
			Hold: j.heldAs(n), Deadline: at.UTC(),
			Reason: fmt.Sprintf("node %s had not reported the stop of attempt %d by its limit of %s plus RENT's grace of %s (%s): RENT ended the attempt there",
				j.node, j.attempt, j.limit, m.grace, at.UTC().Format(time.RFC3339)),
		}})
	}
	return out
}

// armDue sets due to wake the scheduler at the pool's next deadline, while
// this instance leads: an attempt's deadline passes without any event to
// wake it. A deadline already past (its HoldExpired conflicted, or waits
// for a HoldLost) is tried again a second later, not at once, so that a
// decision the log keeps refusing does not spin.
func (s *Service) armDue(due *time.Timer) {
	s.mu.Lock()
	next := s.pool.NextDue()
	s.mu.Unlock()
	if next.IsZero() || !s.leading() {
		due.Stop()
		return
	}
	until := next.Sub(s.now())
	if until <= 0 {
		until = time.Second
	}
	due.Reset(until)
}
