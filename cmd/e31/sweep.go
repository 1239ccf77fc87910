package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
)

// waitSweep waits until every job of a sweep is over, asking the ledger in
// long polls, then prints the sweep's summary. The exit status is 0 only if
// every job succeeded.
func (c *client) waitSweep(ctx context.Context, sweep string, timeout time.Duration, asJSON bool) error {
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	q := wire.ListRequest{Sweep: sweep, Fresh: true, UntilOver: true, Wait: 30 * time.Second, Limit: 1}
	for {
		if dl, ok := wctx.Deadline(); ok {
			q.Wait = min(30*time.Second, max(time.Until(dl), time.Millisecond))
		}
		var reply wire.ListReply
		err := c.request(wctx, c.ledger(wire.EndpointList), q, &reply, q.Wait+10*time.Second)
		if err != nil && wctx.Err() == nil {
			return err
		}
		if err == nil && reply.Error != "" {
			return troubleErr(errors.New(reply.Error))
		}
		q.Fresh = false
		// The records as they are, even once the time is up: to say how
		// far the sweep got.
		recs, err := c.sweepRecords(ctx, sweep)
		if err != nil {
			return err
		}
		left := 0
		for _, r := range recs {
			if !r.Over() {
				left++
			}
		}
		if left == 0 {
			return c.printSweepResult(sweep, recs, asJSON)
		}
		if wctx.Err() != nil {
			return troubleErr(fmt.Errorf("sweep %s: %d of %d jobs still not over after %s", sweep, left, len(recs), timeout))
		}
	}
}

// printSweepResult prints a finished sweep; the exit status is 0 only if
// every job succeeded.
func (c *client) printSweepResult(sweep string, recs []*hold.HoldRecord, asJSON bool) error {
	if asJSON {
		if err := writeJSON(c.a.out, sweepSummaryOf(sweep, recs)); err != nil {
			return err
		}
	} else {
		printSweep(c.a.out, sweep, recs)
	}
	for _, r := range recs {
		if r.Outcome != events.Succeeded {
			return silent(exitFailed)
		}
	}
	return nil
}

// sweepRecords reads every record of a sweep as of now.
func (c *client) sweepRecords(ctx context.Context, sweep string) ([]*hold.HoldRecord, error) {
	return c.allRecords(ctx, wire.ListRequest{Sweep: sweep})
}

// sweepSummary is the JSON form of a sweep's state.
type sweepSummary struct {
	Sweep    string         `json:"sweep"`
	Jobs     int            `json:"jobs"`
	States   map[string]int `json:"states"`
	Outcomes map[string]int `json:"outcomes"`
	// HeldSeconds is the meter's total over every job of the sweep.
	HeldSeconds float64            `json:"held_seconds"`
	Records     []*hold.HoldRecord `json:"records"`
}

func sweepSummaryOf(sweep string, recs []*hold.HoldRecord) sweepSummary {
	s := sweepSummary{Sweep: sweep, Jobs: len(recs), States: map[string]int{}, Outcomes: map[string]int{}, Records: recs}
	for _, r := range recs {
		s.States[r.State]++
		if r.Over() {
			s.Outcomes[string(r.Outcome)]++
		}
		s.HeldSeconds += r.HeldSeconds
	}
	return s
}

func printSweep(w io.Writer, sweep string, recs []*hold.HoldRecord) {
	s := sweepSummaryOf(sweep, recs)
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
