package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/retry"
)

// longPoll is how long one request of a wait may be held by the ledger.
const longPoll = 30 * time.Second

// pollWait is how long the next long poll may wait under ctx's deadline.
func pollWait(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return min(longPoll, max(time.Until(dl), time.Millisecond))
	}
	return longPoll
}

// withTimeout is ctx bounded by timeout; 0 is no bound.
func withTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout > 0 {
		return context.WithTimeout(ctx, timeout)
	}
	return ctx, func() {}
}

// notRunning is whether err says that no instance of the service listens,
// which a wait rides out (retry.Absent).
func notRunning(err error) bool { return errors.Is(err, ErrNotRunning) }

// Wait waits until a job is over (its compute released, or it was
// rejected or cancelled) and returns its hold record, asking the ledger in
// long polls: waiting needs no access to the log, only to one's own
// records. While no ledger answers (one restarting), it asks again for a
// while (retry.Absent), then fails with ErrNotRunning. After timeout (0: no
// limit) it gives up with an error that says where the job is. An id that
// is no job wraps ErrNoSuchJob (a sweep's id is not: see WaitSweep).
func (c *Client) Wait(ctx context.Context, job string, timeout time.Duration) (*hold.HoldRecord, error) {
	if err := validJob(job); err != nil {
		return nil, err
	}
	wctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	q := wire.RecordRequest{Job: job, Fresh: true, UntilOver: true}
	var rec *hold.HoldRecord
	for {
		q.Wait = pollWait(wctx)
		var r *hold.HoldRecord
		err := retry.Do(wctx, retry.Absent, func() (err error) {
			r, _, err = c.AskRecord(wctx, q)
			return err
		}, retry.If(notRunning))
		if errors.Is(err, ErrNoSuchJob) && q.Fresh {
			return nil, err
		}
		if err != nil && wctx.Err() == nil {
			return nil, err
		}
		if r != nil {
			rec = r
		}
		if rec != nil && rec.Over() {
			return rec, nil
		}
		if wctx.Err() != nil {
			state := "unknown"
			if rec != nil {
				state = rec.State
			}
			return rec, fmt.Errorf("job %s is still %s after %s", job, state, timeout)
		}
		q.Fresh = false
	}
}

// WaitSweep waits until every job of a sweep is over, asking the ledger in
// long polls, and returns their records, every member's (Summarize counts
// each point once). It rides out a ledger that is not
// listening as Wait does. After timeout (0: no limit) it gives up with an
// error that says how far the sweep got.
func (c *Client) WaitSweep(ctx context.Context, sweep string, timeout time.Duration) ([]*hold.HoldRecord, error) {
	wctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	q := wire.ListRequest{Sweep: sweep, Fresh: true, UntilOver: true, Limit: 1}
	for {
		q.Wait = pollWait(wctx)
		var reply wire.ListReply
		err := retry.Do(wctx, retry.Absent, func() error {
			return c.request(wctx, c.ledger(wire.EndpointList), q, &reply, q.Wait+10*time.Second)
		}, retry.If(notRunning))
		if err != nil && wctx.Err() == nil {
			return nil, err
		}
		if err == nil && reply.Error != "" {
			return nil, errors.New(reply.Error)
		}
		q.Fresh = false
		// The records as they are, even once the time is up: to say how
		// far the sweep got.
		recs, err := c.SweepRecords(ctx, sweep)
		if err != nil {
			return nil, err
		}
		left := 0
		for _, r := range recs {
			if !r.Over() {
				left++
			}
		}
		if left == 0 {
			return recs, nil
		}
		if wctx.Err() != nil {
			return recs, fmt.Errorf("sweep %s: %d of %d jobs still not over after %s", sweep, left, len(Points(recs)), timeout)
		}
	}
}

// SweepRecords reads every record of a sweep as of now; none if id is no
// sweep's.
func (c *Client) SweepRecords(ctx context.Context, sweep string) ([]*hold.HoldRecord, error) {
	return c.AllRecords(ctx, wire.ListRequest{Sweep: sweep})
}

// SweepSummary is a sweep's state: the form of `e31 status SWEEP --json`.
// It counts the sweep's points, each by the member that counts for it
// (Points): a point submitted again counts once, as its latest member.
type SweepSummary struct {
	Sweep    string         `json:"sweep"`
	Jobs     int            `json:"jobs"`
	States   map[string]int `json:"states"`
	Outcomes map[string]int `json:"outcomes"`
	// Replaced counts the members submitted again since (e31 submit
	// --again): in the sweep's history and its held seconds, in no count
	// above.
	Replaced int `json:"replaced,omitempty"`
	// HeldSeconds is the meter's total over every member of the sweep,
	// those replaced included.
	HeldSeconds float64 `json:"held_seconds"`
	// Records are the points' members, in index order.
	Records []*hold.HoldRecord `json:"records"`
}

// Summarize counts a sweep's points by state and outcome.
func Summarize(sweep string, recs []*hold.HoldRecord) SweepSummary {
	points := Points(recs)
	s := SweepSummary{Sweep: sweep, Jobs: len(points), States: map[string]int{}, Outcomes: map[string]int{}, Records: points}
	for _, r := range recs {
		s.HeldSeconds += r.HeldSeconds
	}
	s.Replaced = len(recs) - len(points)
	for _, r := range points {
		s.States[r.State]++
		if r.Over() {
			s.Outcomes[string(r.Outcome)]++
		}
	}
	return s
}
