package audit

import (
	"strings"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// sweepCancels are the cancels of whole sweeps (events.SweepCancel) the
// audit has read, by sweep: who asked, and where in the log. Such a cancel
// is on the sweep's id, in no member's history, and asks to cancel every
// member submitted before it; a member's JobCancelled then needs no cancel
// of its own. A tenant may publish one on any id, so they are few only as
// long as tenants are honest; each costs a few dozen bytes, as any message
// a tenant publishes on a job of its choosing does.
type sweepCancels map[string][]sweepCancel

type sweepCancel struct {
	by  string
	seq uint64
}

// add records that by asked at seq to cancel sweep. The strings are
// copies: they would otherwise keep the message's headers and body.
func (s *sweepCancels) add(sweep, by string, seq uint64) {
	if *s == nil {
		*s = sweepCancels{}
	}
	(*s)[strings.Clone(sweep)] = append((*s)[sweep], sweepCancel{by: strings.Clone(by), seq: seq})
}

// asked reports whether a cancel of the sweep of rec, by someone who may
// cancel rec's job, was logged after the job's submission (at submitted)
// and before at: the rule RENT and RUN apply (pkg/events).
func (s sweepCancels) asked(rec *hold.HoldRecord, submitted, at uint64) bool {
	if rec.Sweep == nil || submitted == 0 {
		return false
	}
	for _, c := range s[rec.Sweep.ID] {
		if c.seq > submitted && c.seq < at && events.MayCancel(c.by, rec.Submitter) {
			return true
		}
	}
	return false
}
