package audit

import (
	"strings"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// sweepCancels are the cancels of whole sweeps (events.SweepCancel) the
// audit has read, by sweep: who asked, up to which round, and where in the
// log. Such a cancel is on the sweep's id, in no member's history, and asks
// to cancel every member of its round or an earlier one, whenever it is
// submitted; such a member's JobCancelled then needs no cancel of its own. A tenant may publish one on any id, so they are few only as
// long as tenants are honest; each costs a few dozen bytes, as any message
// a tenant publishes on a job of its choosing does.
type sweepCancels map[string][]sweepCancel

type sweepCancel struct {
	by    string
	round int
	seq   uint64
}

// add records that c, at seq, asked to cancel sweep. The strings are
// copies: they would otherwise keep the message's headers and body.
func (s *sweepCancels) add(sweep string, c *events.CancelRequested, seq uint64) {
	if *s == nil {
		*s = sweepCancels{}
	}
	(*s)[strings.Clone(sweep)] = append((*s)[sweep], sweepCancel{by: strings.Clone(c.By), round: c.Round, seq: seq})
}

// asked reports whether a cancel of the sweep of rec that covers rec's
// job (of its round or a later one, by someone who may cancel it) was
// logged before at: the rule RENT and RUN apply (pkg/events).
func (s sweepCancels) asked(rec *hold.HoldRecord, at uint64) bool {
	if rec.Sweep == nil {
		return false
	}
	for _, c := range s[rec.Sweep.ID] {
		if c.seq < at && rec.Sweep.Again <= c.round && events.MayCancel(c.by, rec.Submitter) {
			return true
		}
	}
	return false
}
