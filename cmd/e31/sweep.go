package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/api"
	"github.com/e31net/e31/pkg/events"
)

// waitSweep waits until every job of a sweep is over, reading the log once
// from the sweep's first request, then prints the sweep's summary. The exit
// status is 0 only if every job succeeded.
func (c *client) waitSweep(ctx context.Context, sweep string, ids []string, from uint64, timeout time.Duration, asJSON bool) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	left := make(map[string]bool, len(ids))
	for _, id := range ids {
		left[id] = true
	}
	var last uint64
	cons, err := c.js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.JobSubjects}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from})
	if err != nil {
		return troubleErr(fmt.Errorf("follow sweep %s: %w", sweep, err))
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return troubleErr(fmt.Errorf("follow sweep %s: %w", sweep, err))
	}
	stop := context.AfterFunc(ctx, iter.Stop)
	defer stop()
	for len(left) > 0 {
		m, err := iter.Next()
		if err != nil {
			iter.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return troubleErr(fmt.Errorf("sweep %s: %d of %d jobs still not over after %s", sweep, len(left), len(ids), timeout))
			}
			return troubleErr(fmt.Errorf("follow sweep %s: %w", sweep, err))
		}
		env, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil || !left[env.Subject] || !events.Terminal(env.Event) {
			continue
		}
		delete(left, env.Subject)
		if md, err := m.Metadata(); err == nil {
			last = md.Sequence.Stream
		}
	}
	iter.Stop()
	recs, err := c.sweepRecords(ctx, sweep, last)
	if err != nil {
		return err
	}
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

// sweepRecords reads every record of a sweep as of at least minSeq.
func (c *client) sweepRecords(ctx context.Context, sweep string, minSeq uint64) ([]*api.HoldRecord, error) {
	return c.allRecords(ctx, api.ListRequest{Sweep: sweep, MinSeq: minSeq})
}

// sweepSummary is the JSON form of a sweep's state.
type sweepSummary struct {
	Sweep    string         `json:"sweep"`
	Jobs     int            `json:"jobs"`
	States   map[string]int `json:"states"`
	Outcomes map[string]int `json:"outcomes"`
	// HeldSeconds is the meter's total over every job of the sweep.
	HeldSeconds float64           `json:"held_seconds"`
	Records     []*api.HoldRecord `json:"records"`
}

func sweepSummaryOf(sweep string, recs []*api.HoldRecord) sweepSummary {
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

func printSweep(w io.Writer, sweep string, recs []*api.HoldRecord) {
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
