package rent

import (
	"slices"

	"github.com/e31net/e31/pkg/events"
)

// A sweep's cancel (events.SweepCancel) is one event on the sweep's id
// that asks to cancel every member of the sweep of its round or an earlier
// one (events.CancelRequested.Round). The pool cancels the members that
// wait when it applies it, and, since the sweep may still be being
// submitted then, each member submitted after it that it covers, as the
// member's submission is applied: the pool remembers the cancels of the
// newest maxSweepCancels sweeps, and its checkpoint carries them, since
// the log holds them before a later member's submission. A member held
// already is marked too: RUN stops it (it reads the same cancel), and
// should its attempt be lost, it is cancelled rather than held again.

// maxSweepCancels is how many sweeps' cancels the pool remembers: a
// sweep's submission takes seconds, and the cancels of older sweeps find
// every member submitted.
const maxSweepCancels = 1024

// SweepCancel is who asked to cancel a sweep, up to which round.
type SweepCancel struct {
	Sweep string `json:"sweep"`
	By    string `json:"by"`
	Round int    `json:"round,omitempty"`
}

// sweepCancels are the sweeps' cancels the pool remembers, by sweep.
type sweepCancels struct {
	by    map[string][]SweepCancel
	order ring
}

// cancelSweep applies a sweep's cancel: it remembers it, and marks every
// live member it covers.
func (p *Pool) cancelSweep(c SweepCancel) {
	s := &p.sweeps
	if s.by == nil {
		s.by = map[string][]SweepCancel{}
	}
	switch have, known := s.by[c.Sweep]; {
	case !known:
		s.by = remember(&s.order, s.by, c.Sweep, maxSweepCancels)
		s.by[c.Sweep] = []SweepCancel{c}
	case !slices.Contains(have, c):
		s.by[c.Sweep] = append(have, c)
	}
	// Every live job rather than an index of sweeps: a sweep's cancel is
	// rare, a pass over even a hundred thousand queued jobs takes
	// milliseconds, and an index would cost every queued job memory.
	for _, j := range p.jobs {
		p.cancelIfSwept(j)
	}
}

// cancelIfSwept marks j cancelled if it is a member of a sweep whose
// cancel covers it: of its round or a later one, from someone who may
// cancel it.
func (p *Pool) cancelIfSwept(j *job) {
	sw := j.spec.Sweep
	if sw == nil || j.cancel {
		return
	}
	for _, c := range p.sweeps.by[sw.ID] {
		if sw.Again <= c.Round && events.MayCancel(c.By, j.submitter) {
			j.cancel = true
			p.attention[j.id] = j
			return
		}
	}
}

// sweepCheckpoint is the sweeps' cancels the pool remembers, oldest
// first, for its checkpoint.
func (p *Pool) sweepCheckpoint() []SweepCancel {
	var out []SweepCancel
	for id := range p.sweeps.order.newestFirst() {
		out = append(out, p.sweeps.by[id]...)
	}
	slices.Reverse(out)
	return out
}

// restoreSweeps gives the pool the sweeps' cancels of a checkpoint.
func (p *Pool) restoreSweeps(cs []SweepCancel) {
	for _, c := range cs {
		p.cancelSweep(c)
	}
}
