package retention

import (
	"time"

	"github.com/e31net/e31/pkg/events"
)

// DecideDelete is what OUTPUT appends about a job's stored data and output
// at now, given the job's whole history: for each of its data and output
// that it still holds, a Deleted if a DeleteRequested asked for it, or if
// its retention has passed. Nothing while the job runs: a request made
// before the end waits for it. A deletion already recorded is never
// recorded again, so a redelivered timer or request changes nothing.
func DecideDelete(history []events.Envelope, now time.Time) []events.Event {
	h := heldBy(history)
	if h == nil || !h.Over {
		return nil
	}
	var out []events.Event
	for _, what := range []string{events.WhatData, events.WhatOutput} {
		if !h.holds(what) {
			continue
		}
		d := events.Deleted{What: what, Files: h.DataFiles, Bytes: h.DataBytes}
		if what == events.WhatOutput {
			d.Files, d.Bytes = h.OutputFiles, h.OutputBytes
		}
		by, asked := h.Requested.By(what)
		switch {
		case asked:
			d.Cause, d.By = events.CauseRequested, by
		case !now.Before(h.Expires()):
			d.Cause = events.CauseExpired
		default:
			continue
		}
		out = append(out, &d)
	}
	return out
}

// heldBy folds one job's history into what it holds.
func heldBy(history []events.Envelope) *Held {
	if len(history) == 0 {
		return nil
	}
	r := NewRefs()
	for _, e := range history {
		e.Seq = 0 // an event read locally may carry none
		r.Apply(e)
	}
	return r.Job(history[0].Subject)
}
