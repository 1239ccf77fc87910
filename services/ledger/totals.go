package ledger

import (
	"sort"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
)

// Totals is what each submitter would be billed for a period: for every
// released attempt that did not end node_lost, the part of its held time that falls in [Since, Until)
// times the resources it held. Cutting at the edges rather than counting
// whole attempts by when they started or ended is what makes the bills of
// consecutive months add up to the bill of the year, whatever ran across
// midnight. An attempt still held has no figure yet: it is counted as open.
// An attempt lost with its node is the pool's loss, not the submitter's:
// its part is counted apart, as lost seconds.
//
// Without a period the answer is the running sums of the jobs that are not
// open (kept with the checkpoint) plus the open jobs, all in memory. With
// one, it reads every record, stored ones included.
func (p *Projection) Totals(q wire.TotalsRequest) ([]wire.Totals, error) {
	by := map[string]*wire.Totals{}
	add := func(submitter string, t wire.Totals) {
		if q.Submitter != "" && submitter != q.Submitter {
			return
		}
		sum := by[submitter]
		if sum == nil {
			sum = &wire.Totals{Submitter: submitter}
			by[submitter] = sum
		}
		addTotals(sum, t, 1)
	}
	if q.Since.IsZero() && q.Until.IsZero() {
		for submitter, t := range p.closed {
			add(submitter, *t)
		}
		for _, e := range p.jobs {
			if e.open() {
				if t, ok := share(e.Record, q.Since, q.Until); ok {
					add(e.Record.Submitter, t)
				}
			}
		}
	} else {
		err := p.each("", "", readAtOnce, false, func(e *entry) bool {
			if t, ok := share(e.Record, q.Since, q.Until); ok {
				add(e.Record.Submitter, t)
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]wire.Totals, 0, len(by))
	for _, t := range by {
		if t.Attempts > 0 || t.Open > 0 || t.LostAttempts > 0 {
			out = append(out, *t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Submitter < out[j].Submitter })
	return out, nil
}

// share is one record's part of the totals of [since, until), and whether
// it has any attempt that was held.
func share(r *hold.HoldRecord, since, until time.Time) (wire.Totals, bool) {
	var t wire.Totals
	held, billed := false, false
	for i := range r.Attempts {
		a := &r.Attempts[i]
		if a.HeldAt == nil {
			continue
		}
		held = true
		if a.ReleasedAt == nil {
			if until.IsZero() || a.HeldAt.Before(until) {
				t.Open++
			}
			continue
		}
		s := overlap(*a.HeldAt, *a.ReleasedAt, since, until)
		if s <= 0 {
			continue
		}
		billed = true
		if a.Outcome == events.NodeLost {
			t.LostAttempts++
			t.LostSeconds += s
			continue
		}
		t.Attempts++
		t.HeldSeconds += s
		t.CPUCoreSeconds += a.Held.CPU * s
		t.MemoryGiBSeconds += float64(a.Held.MemoryBytes) / gib * s
		t.GPUSeconds += float64(a.Held.GPU) * s
	}
	if billed {
		t.Jobs = 1
	}
	return t, held
}

// addTotals adds sign times t to sum.
func addTotals(sum *wire.Totals, t wire.Totals, sign int) {
	f := float64(sign)
	sum.Jobs += sign * t.Jobs
	sum.Attempts += sign * t.Attempts
	sum.Open += sign * t.Open
	sum.HeldSeconds += f * t.HeldSeconds
	sum.CPUCoreSeconds += f * t.CPUCoreSeconds
	sum.MemoryGiBSeconds += f * t.MemoryGiBSeconds
	sum.GPUSeconds += f * t.GPUSeconds
	sum.LostAttempts += sign * t.LostAttempts
	sum.LostSeconds += f * t.LostSeconds
}

// closedPart is a job's part of the running sums: its totals without a
// period, if it is not open.
type closedPart struct {
	submitter string
	t         wire.Totals
	ok        bool
}

// closedShare is e's part of the running sums of the jobs that are not open.
func (p *Projection) closedShare(e *entry) closedPart {
	if e.Record == nil || e.open() {
		return closedPart{}
	}
	t, ok := share(e.Record, time.Time{}, time.Time{})
	return closedPart{submitter: e.Record.Submitter, t: t, ok: ok}
}

// moveClosed takes a job's old part out of the running sums and puts its
// new one in; nothing when they are the same, so that the sums of jobs
// that do not change are added once and never taken out again (floating
// point sums do not come back to the same figure).
func (p *Projection) moveClosed(before, after closedPart) {
	if before == after {
		return
	}
	for _, c := range []struct {
		part closedPart
		sign int
	}{{before, -1}, {after, 1}} {
		if !c.part.ok {
			continue
		}
		sum := p.closed[c.part.submitter]
		if sum == nil {
			sum = &wire.Totals{Submitter: c.part.submitter}
			p.closed[c.part.submitter] = sum
		}
		addTotals(sum, c.part.t, c.sign)
	}
}

// overlap is how many seconds of [from, to) fall in [since, until); a zero
// bound is no bound.
func overlap(from, to, since, until time.Time) float64 {
	if !since.IsZero() && from.Before(since) {
		from = since
	}
	if !until.IsZero() && to.After(until) {
		to = until
	}
	return to.Sub(from).Seconds()
}
