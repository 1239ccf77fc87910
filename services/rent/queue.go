package rent

import (
	"container/heap"
	"container/list"
	"sort"
)

// queue is the jobs waiting to be placed, in the order they are placed:
// higher priority first (a level each); within a priority, the submitter
// holding the least cpu now (a sub-queue each, for fair share); then the
// order of submission. A pass (queue.pass) walks them in that order.
type queue struct {
	levels map[int]*level
	n      int
}

// level is the waiting jobs of one priority, by submitter.
type level struct {
	priority int
	subs     map[string]*subQueue
	n        int
}

// subQueue is one submitter's waiting jobs of one priority, in order.
type subQueue struct {
	submitter string
	priority  int
	jobs      *list.List
}

func newQueue() queue { return queue{levels: map[int]*level{}} }

// len is the number of jobs waiting.
func (q *queue) len() int { return q.n }

// push puts j in its submitter's queue at its priority, in submission
// order, so a job placed again after its node was lost goes back ahead of
// later jobs.
func (q *queue) push(j *job) {
	lv := q.levels[j.spec.Priority]
	if lv == nil {
		lv = &level{priority: j.spec.Priority, subs: map[string]*subQueue{}}
		q.levels[j.spec.Priority] = lv
	}
	sq := lv.subs[j.submitter]
	if sq == nil {
		sq = &subQueue{submitter: j.submitter, priority: j.spec.Priority, jobs: list.New()}
		lv.subs[j.submitter] = sq
	}
	j.state, j.queue = waiting, sq
	for e := sq.jobs.Back(); e != nil; e = e.Prev() {
		if e.Value.(*job).order < j.order {
			j.elem = sq.jobs.InsertAfter(j, e)
			lv.n++
			q.n++
			return
		}
	}
	j.elem = sq.jobs.PushFront(j)
	lv.n++
	q.n++
}

// remove takes j out of the queue, if it is in it.
func (q *queue) remove(j *job) {
	if j.elem == nil {
		return
	}
	sq := j.queue
	sq.jobs.Remove(j.elem)
	j.elem, j.queue = nil, nil
	lv := q.levels[sq.priority]
	lv.n--
	q.n--
	if sq.jobs.Len() == 0 {
		delete(lv.subs, sq.submitter)
	}
	if lv.n == 0 {
		delete(q.levels, sq.priority)
	}
}

// bySubmitter is the number of jobs waiting of each submitter with any.
func (q *queue) bySubmitter() map[string]int {
	by := map[string]int{}
	for _, lv := range q.levels {
		for name, sq := range lv.subs {
			if n := sq.jobs.Len(); n > 0 {
				by[name] += n
			}
		}
	}
	return by
}

// position is j's place in the queue's order, counting jobs of higher
// priority and, in its own priority, jobs ahead of it in submission order
// (an estimate: fair share may move it).
func (q *queue) position(j *job) int {
	pos := 1
	for prio, lv := range q.levels {
		if prio > j.spec.Priority {
			pos += lv.n
		}
	}
	if lv := q.levels[j.spec.Priority]; lv != nil {
		for _, sq := range lv.subs {
			for e := sq.jobs.Front(); e != nil && e.Value.(*job).order < j.order; e = e.Next() {
				pos++
			}
		}
	}
	return pos
}

// priorities lists the levels' priorities, highest first.
func (q *queue) priorities() []int {
	out := make([]int, 0, len(q.levels))
	for prio := range q.levels {
		out = append(out, prio)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(out)))
	return out
}

// pass walks the waiting jobs once, in the queue's order, counting fair
// share with usage (milli-cpu held, by submitter), which the caller grows
// as it places jobs (and then calls charged). The queue must not change
// during a pass.
func (q *queue) pass(usage map[string]int64) *pass {
	return &pass{q: q, prios: q.priorities(), h: subHeap{usage: usage}}
}

// pass is a walk of the queue: see queue.pass.
type pass struct {
	q     *queue
	prios []int // the levels still to walk, highest first
	h     subHeap
}

// next is the next job in the queue's order; nil when none is left.
func (ps *pass) next() *job {
	for ps.h.Len() == 0 {
		if len(ps.prios) == 0 {
			return nil
		}
		lv := ps.q.levels[ps.prios[0]]
		ps.prios = ps.prios[1:]
		ps.h.items = ps.h.items[:0]
		for _, sq := range lv.subs {
			ps.h.push(cursor{q: sq, e: sq.jobs.Front()})
		}
		heap.Init(&ps.h)
	}
	c := heap.Pop(&ps.h).(cursor)
	j := c.e.Value.(*job)
	if c.e = c.e.Next(); c.e != nil {
		heap.Push(&ps.h, c)
	}
	return j
}

// charged restores the order after submitter's usage grew.
func (ps *pass) charged(submitter string) { ps.h.fix(submitter) }

// cursor is a submitter's next job during a pass.
type cursor struct {
	q *subQueue
	e *list.Element
}

// subHeap orders submitters for fair share: least cpu held first, then the
// earliest next job.
type subHeap struct {
	items []cursor
	usage map[string]int64
}

func (h *subHeap) Len() int { return len(h.items) }
func (h *subHeap) Less(a, b int) bool {
	ua, ub := h.usage[h.items[a].q.submitter], h.usage[h.items[b].q.submitter]
	if ua != ub {
		return ua < ub
	}
	return h.items[a].e.Value.(*job).order < h.items[b].e.Value.(*job).order
}
func (h *subHeap) Swap(a, b int) { h.items[a], h.items[b] = h.items[b], h.items[a] }
func (h *subHeap) Push(x any)    { h.items = append(h.items, x.(cursor)) }
func (h *subHeap) push(c cursor) { h.items = append(h.items, c) }
func (h *subHeap) Pop() any {
	last := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return last
}

// fix restores the heap's order after a submitter's usage grew.
func (h *subHeap) fix(submitter string) {
	for i := range h.items {
		if h.items[i].q.submitter == submitter {
			heap.Fix(h, i)
			return
		}
	}
}
