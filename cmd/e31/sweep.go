package main

import (
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/hold"
)

// printSweepResult prints a finished sweep; the exit status is 0 only if
// every job succeeded.
func (a *app) printSweepResult(sweep string, recs []*hold.HoldRecord, asJSON bool) error {
	s := client.Summarize(sweep, recs)
	if err := a.show(asJSON, s, s.WriteText); err != nil {
		return err
	}
	if !s.Succeeded() {
		return silent(exitFailed)
	}
	return nil
}
