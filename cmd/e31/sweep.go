package main

import (
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// printSweepResult prints a finished sweep; the exit status is 0 only if
// every job succeeded.
func (a *app) printSweepResult(sweep string, recs []*hold.HoldRecord, asJSON bool) error {
	var err error
	if asJSON {
		err = writeJSON(a.out, client.Summarize(sweep, recs))
	} else {
		err = client.Summarize(sweep, recs).WriteText(a.out)
	}
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.Outcome != events.Succeeded {
			return silent(exitFailed)
		}
	}
	return nil
}
