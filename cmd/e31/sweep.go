package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// printSweepResult prints a finished sweep; the exit status is 0 only if
// every job succeeded.
func (a *app) printSweepResult(sweep string, recs []*hold.HoldRecord, asJSON bool) error {
	if asJSON {
		if err := writeJSON(a.out, client.Summarize(sweep, recs)); err != nil {
			return err
		}
	} else {
		printSweep(a.out, sweep, recs)
	}
	for _, r := range recs {
		if r.Outcome != events.Succeeded {
			return silent(exitFailed)
		}
	}
	return nil
}

func printSweep(w io.Writer, sweep string, recs []*hold.HoldRecord) {
	s := client.Summarize(sweep, recs)
	fmt.Fprintf(w, "sweep %s: %d jobs, %.3f s held in all\n", sweep, s.Jobs, s.HeldSeconds)
	fmt.Fprintf(w, "  states:   %s\n", counts(s.States))
	if len(s.Outcomes) > 0 {
		fmt.Fprintf(w, "  outcomes: %s\n", counts(s.Outcomes))
	}
	sort.Slice(recs, func(a, b int) bool { return recs[a].Sweep.Index < recs[b].Sweep.Index })
	for _, r := range recs {
		if r.Over() && r.Outcome != events.Succeeded {
			fmt.Fprintf(w, "  [%d] value %q: %s: %s (%s)\n", r.Sweep.Index, r.Sweep.Value, r.Outcome, r.Reason, r.Job)
		}
	}
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}
