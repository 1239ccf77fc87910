package rent

import (
	"iter"
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

// sweepCancels are the sweeps' cancels the pool remembers, by sweep: the
// newest maxSweepCancels sweeps'.
type sweepCancels struct {
	by recent[[]SweepCancel]
}

func newSweepCancels() sweepCancels {
	return sweepCancels{by: newRecent[[]SweepCancel](maxSweepCancels)}
}

// add remembers c.
func (s *sweepCancels) add(c SweepCancel) {
	if have, _ := s.by.get(c.Sweep); !slices.Contains(have, c) {
		s.by.put(c.Sweep, append(have, c))
	}
}

// covers reports whether a remembered cancel covers j, a member of a sweep:
// of its round or a later one, from someone who may cancel it.
func (s *sweepCancels) covers(j *job) bool {
	sw := j.spec.Sweep
	if sw == nil {
		return false
	}
	cs, _ := s.by.get(sw.ID)
	for _, c := range cs {
		if sw.Again <= c.Round && events.MayCancel(c.By, j.submitter) {
			return true
		}
	}
	return false
}

// list is the cancels remembered, oldest first, for the pool's checkpoint.
func (s *sweepCancels) list() []SweepCancel {
	var out []SweepCancel
	for id := range s.by.newestFirst() {
		cs, _ := s.by.get(id)
		out = append(out, cs...)
	}
	slices.Reverse(out)
	return out
}

// cancelSwept marks every job of jobs that a cancel of sweeps covers
// cancelled, for Decide's attention. Every live job rather than an index of
// sweeps: a sweep's cancel is rare, a pass over even a hundred thousand
// queued jobs takes milliseconds, and an index would cost every queued job
// memory.
func cancelSwept(jobs iter.Seq[*job], sweeps *sweepCancels, attention map[string]*job) {
	for j := range jobs {
		if !j.cancel && sweeps.covers(j) {
			j.cancel = true
			attention[j.id] = j
		}
	}
}
