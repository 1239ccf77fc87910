package rent

import (
	"cmp"
	"slices"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// placement is RENT's decision to hold compute for a waiting job on a node
// now. Decide records it as a ComputeHeld (decision); the job is placed
// once that event is applied.
type placement struct {
	job  *job
	node *node
	// gpus are the devices it holds, in the order the job sees them: nil
	// on a node that announced no devices.
	gpus []string
}

// decision is p as the event to append: the disk held is request.disk and
// the staged inputs, both written to the node's disk; grace is how long
// past the limit RENT waits for the node's stop (overrun.go), which the
// node is told so that it reports in time.
func (p placement) decision(grace time.Duration) Decision {
	j := p.job
	return Decision{Job: j.id, Expect: j.last, Event: &events.ComputeHeld{
		Hold: events.Hold{Attempt: j.attempt + 1, Node: p.node.name, CPU: j.spec.Request.CPU, MemoryBytes: j.spec.Request.MemoryBytes,
			GPU: j.spec.Request.GPU, DiskBytes: j.need.disk, GPUs: p.gpus},
		Submitter:    j.submitter,
		Spec:         j.spec,
		GraceSeconds: grace.Seconds(),
	}}
}

// reservation is where and when the first job that does not fit will.
type reservation struct {
	job   *job
	node  string
	at    time.Time
	extra res // what the node will have beyond the job's need at that time
}

// placer makes the placements of a pass. Backfill counts on every job
// being gone from its node by its limit plus grace; a pass looks at no
// more than maxScan waiting jobs. Its free and usage are scratch kept
// between passes: a pass over a thousand nodes would otherwise allocate
// 32 KiB of them, which the collector then pays for with every queued
// job's heap.
type placer struct {
	grace   time.Duration
	maxScan int
	free    []res
	// gpus counts, per live node, the devices earlier placements of the
	// pass took: the next takes the free ones after them.
	gpus  []int64
	usage map[string]int64
}

// place walks the waiting jobs of q in the queue's order and places what
// fits on live (the live nodes, by name), at most max jobs; held is the
// milli-cpu each submitter holds now, for fair share. The first job in
// that order that does not fit gets a reservation: the node and time at
// which it will fit. Later jobs may start ahead of it (backfill) only where
// they cannot delay that reservation.
//
// It costs the same whatever the queue's length: it looks at no more than
// maxScan jobs, and skips a job that cannot fit anywhere now in constant
// time, by comparing it with the most any node has free (dimension by
// dimension, an upper bound). The reservation is computed only once a
// later job could start ahead of it.
func (pl *placer) place(live []*node, q *queue, held map[string]int64, now time.Time, max int) []placement {
	if len(live) == 0 || q.len() == 0 {
		return nil
	}
	if cap(pl.free) < len(live) {
		pl.free = make([]res, len(live))
		pl.gpus = make([]int64, len(live))
	}
	free, taken := pl.free[:len(live)], pl.gpus[:len(live)]
	var capBound res
	for i, n := range live {
		free[i] = n.free()
		taken[i] = 0
		capBound = upper(capBound, n.cap)
	}
	freeBound := bound(free)
	if pl.usage == nil {
		pl.usage = make(map[string]int64, len(held))
	}
	usage := pl.usage
	clear(usage)
	for s, u := range held {
		usage[s] = u
	}
	var out []placement
	var blocked *job      // the first job in order that does not fit now
	var resv *reservation // where and when it will, once needed
	ps := q.pass(usage)
	for scanned := 0; len(out) < max && scanned < pl.maxScan; scanned++ {
		if freeBound.milliCPU <= 0 || freeBound.memory <= 0 {
			// The pool is full: no job can start, however deep the queue.
			return out
		}
		j := ps.next()
		if j == nil {
			break
		}
		if j.cancel || j.rejection != "" || !j.need.fits(capBound) {
			continue
		}
		i := -1
		if j.need.fits(freeBound) {
			i = pick(live, free, j, now, pl.grace, nil)
			if i >= 0 && blocked != nil {
				// j would start ahead of an earlier job that waits: only
				// where that cannot delay it.
				if resv == nil {
					resv = reserve(blocked, live, free, now, pl.grace)
				}
				i = pick(live, free, j, now, pl.grace, resv)
			}
		}
		if i < 0 {
			if blocked == nil && anyCouldHold(live, j) {
				blocked = j
			}
			continue
		}
		n := live[i]
		free[i] = free[i].minus(j.need)
		freeBound = bound(free)
		if resv != nil && n.name == resv.node && now.Add(j.limit+pl.grace).After(resv.at) {
			resv.extra = resv.extra.minus(j.need)
		}
		usage[j.submitter] += j.need.milliCPU
		ps.charged(j.submitter)
		var gpus []string
		if n.devs != nil && j.need.gpu > 0 {
			gpus = n.devs.pick(j.need.gpu, taken[i])
			taken[i] += j.need.gpu
		}
		out = append(out, placement{job: j, node: n, gpus: gpus})
	}
	return out
}

// upper is the larger of a and b in every dimension.
func upper(a, b res) res {
	return res{max(a.milliCPU, b.milliCPU), max(a.memory, b.memory), max(a.gpu, b.gpu), max(a.disk, b.disk)}
}

// bound is the most any node has free, dimension by dimension.
func bound(free []res) res {
	var b res
	for _, f := range free {
		b = upper(b, f)
	}
	return b
}

// pick chooses the node for j now (an index into live, whose free
// resources are free), or -1 if none may hold it. With a reservation for
// an earlier job, j may only take what cannot delay it.
func pick(live []*node, free []res, j *job, now time.Time, grace time.Duration, resv *reservation) int {
	best := -1
	for i, n := range live {
		f := free[i]
		if !j.need.fits(f) || !n.runs(j) {
			continue
		}
		if resv != nil && n.name == resv.node {
			endsBefore := !now.Add(j.limit + grace).After(resv.at)
			if !endsBefore && !j.need.fits(resv.extra) {
				continue
			}
		}
		// The node with the most free cpu spreads work; by name among equals
		// (live is sorted), so that decisions are repeatable.
		if best < 0 || f.milliCPU > free[best].milliCPU {
			best = i
		}
	}
	return best
}

// reserve finds the node and time at which j will fit, counting on every
// job placed to be gone by its limit plus grace, and on nothing else.
func reserve(j *job, live []*node, free []res, now time.Time, grace time.Duration) *reservation {
	var best *reservation
	for i, n := range live {
		if !n.couldHold(j) {
			continue
		}
		type ending struct {
			at    time.Time
			order uint64
			give  res
		}
		ends := make([]ending, 0, len(n.jobs))
		for _, o := range n.jobs {
			at := o.heldAt.Add(o.limit + grace)
			if at.Before(now) {
				at = now
			}
			ends = append(ends, ending{at, o.order, o.need})
		}
		// Jobs past their end all end "now": submission order breaks the
		// tie, so that the reservation (and what backfill it allows) is the
		// same in every pool built from the same log, whatever order the
		// node's map gives them in.
		slices.SortFunc(ends, func(a, b ending) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return cmp.Compare(a.order, b.order)
		})
		have, at := free[i], now
		for _, e := range ends {
			if j.need.fits(have) {
				break
			}
			have, at = have.plus(e.give), e.at
		}
		if !j.need.fits(have) {
			continue
		}
		if best == nil || at.Before(best.at) {
			best = &reservation{job: j, node: n.name, at: at, extra: have.minus(j.need)}
		}
	}
	return best
}

// anyCouldHold reports whether any of live, empty, could hold j.
func anyCouldHold(live []*node, j *job) bool {
	for _, n := range live {
		if n.couldHold(j) {
			return true
		}
	}
	return false
}
