package ledger

import (
	"sort"
	"time"

	"github.com/e31net/e31/pkg/query/wire"
)

// Totals is what each submitter would be billed for a period: for every
// released attempt, the part of its held time that falls in [Since, Until)
// times the resources it held. Cutting at the edges rather than counting
// whole attempts by when they started or ended is what makes the bills of
// consecutive months add up to the bill of the year, whatever ran across
// midnight. An attempt still held has no figure yet: it is counted as open.
func (p *Projection) Totals(q wire.TotalsRequest) []wire.Totals {
	by := map[string]*wire.Totals{}
	for _, job := range p.order {
		r := p.records[job]
		if q.Submitter != "" && r.Submitter != q.Submitter {
			continue
		}
		billed := false
		for i := range r.Attempts {
			a := &r.Attempts[i]
			if a.HeldAt == nil {
				continue
			}
			t := by[r.Submitter]
			if t == nil {
				t = &wire.Totals{Submitter: r.Submitter}
				by[r.Submitter] = t
			}
			if a.ReleasedAt == nil {
				if q.Until.IsZero() || a.HeldAt.Before(q.Until) {
					t.Open++
				}
				continue
			}
			s := overlap(*a.HeldAt, *a.ReleasedAt, q.Since, q.Until)
			if s <= 0 {
				continue
			}
			billed = true
			t.Attempts++
			t.HeldSeconds += s
			t.CPUCoreSeconds += a.Held.CPU * s
			t.MemoryGiBSeconds += float64(a.Held.MemoryBytes) / gib * s
			t.GPUSeconds += float64(a.Held.GPU) * s
		}
		if billed {
			by[r.Submitter].Jobs++
		}
	}
	out := make([]wire.Totals, 0, len(by))
	for _, t := range by {
		if t.Attempts > 0 || t.Open > 0 {
			out = append(out, *t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Submitter < out[j].Submitter })
	return out
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
