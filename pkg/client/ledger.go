package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
)

// Head asks the ledger how far the log goes: its last sequence now, read
// by the ledger, so that a client needs no access to the log to ask any
// service for an answer as of now, and its hash chain head. Only the
// auditor and the operator are told.
func (c *Client) Head(ctx context.Context) (wire.LedgerInfo, error) {
	var info wire.LedgerInfo
	if err := c.request(ctx, c.ledger(wire.EndpointHead), nil, &info, 10*time.Second); err != nil {
		return info, err
	}
	switch {
	case info.Code == wire.CodeNotPermitted:
		return info, fmt.Errorf("%w for %s: %s", ErrNotPermitted, c.who, info.Error)
	case info.Error != "":
		return info, fmt.Errorf("the ledger's head: %s", info.Error)
	}
	return info, nil
}

// lastSeq is the log's last sequence now, as the ledger reads it.
func (c *Client) lastSeq(ctx context.Context) (uint64, error) {
	info, err := c.Head(ctx)
	return info.LastSeq, err
}

// asOfNow is how to ask for an answer as of everything logged so far: for
// the auditor and the operator, the log's last sequence as MinSeq (which
// also tells how far behind an answer is); for a submitter, which is told
// nothing of the log beyond its own jobs, Fresh, and the service reads the
// last sequence itself.
func (c *Client) asOfNow(ctx context.Context) (minSeq uint64, fresh bool, err error) {
	if !auth.SeesAll(c.who.User) {
		return 0, true, nil
	}
	seq, err := c.lastSeq(ctx)
	return seq, false, err
}

// Record reads a job's hold record including everything logged so far.
func (c *Client) Record(ctx context.Context, job string) (*hold.HoldRecord, error) {
	rec, _, err := c.FreshRecord(ctx, job)
	return rec, err
}

// FreshRecord reads a job's record including everything logged so far,
// and how far the ledger had read then.
func (c *Client) FreshRecord(ctx context.Context, job string) (*hold.HoldRecord, uint64, error) {
	if err := validJob(job); err != nil {
		return nil, 0, err
	}
	return c.AskRecord(ctx, wire.RecordRequest{Job: job, Fresh: true, Wait: 10 * time.Second})
}

// AskRecord asks the ledger for a record as q says and returns it with how
// far the ledger had read when it answered.
func (c *Client) AskRecord(ctx context.Context, q wire.RecordRequest) (*hold.HoldRecord, uint64, error) {
	var reply wire.RecordReply
	if err := c.request(ctx, c.ledger(wire.EndpointRecord), q, &reply, wire.WaitOf(q.Wait)+5*time.Second); err != nil {
		return nil, 0, err
	}
	if reply.Code == wire.CodeNoSuchJob {
		return nil, reply.Applied, fmt.Errorf("%w: %s", ErrNoSuchJob, q.Job)
	}
	if reply.Error != "" {
		return nil, reply.Applied, errors.New(reply.Error)
	}
	// A submitter is not told how far the ledger has read (see
	// wire.RecordReply); it has read its job's last event, at least.
	applied := reply.Applied
	if r := reply.Record; r != nil && len(r.Events) > 0 {
		applied = max(applied, r.Events[len(r.Events)-1].Seq)
	}
	return reply.Record, applied, nil
}

// RecordSoFar reads a job's record including everything logged so far or,
// while the ledger is still catching up after a start, as far as it has
// read, with how far behind that is.
func (c *Client) RecordSoFar(ctx context.Context, job string) (*hold.HoldRecord, Behind, error) {
	rec, err := c.Record(ctx, job)
	if err == nil {
		return rec, Behind{}, nil
	}
	var reply wire.RecordReply
	if rerr := c.request(ctx, c.ledger(wire.EndpointRecord), wire.RecordRequest{Job: job}, &reply, 15*time.Second); rerr != nil || reply.Record == nil {
		return nil, Behind{}, err
	}
	b := Behind{CatchingUp: true}
	if auth.SeesAll(c.who.User) {
		seq, lerr := c.lastSeq(ctx)
		if lerr != nil || reply.Applied >= seq {
			return nil, Behind{}, err
		}
		b = Behind{Applied: reply.Applied, Last: seq}
	}
	return reply.Record, b, nil
}

// Why asks the scheduler why a job waits, as of at least minSeq.
func (c *Client) Why(ctx context.Context, job string, minSeq uint64) (wire.WhyReply, error) {
	var reply wire.WhyReply
	if err := c.request(ctx, wire.RentWhySubject(c.who.User), wire.WhyRequest{Job: job, MinSeq: minSeq}, &reply, 8*time.Second); err != nil {
		return reply, err
	}
	if reply.Error != "" {
		return reply, errors.New(reply.Error)
	}
	return reply, nil
}

// Status is where a job is and, while it waits, why: the form of `e31
// status --json`.
type Status struct {
	ID       string         `json:"id"`
	Name     string         `json:"name,omitempty"`
	State    string         `json:"state"`
	Outcome  events.Outcome `json:"outcome,omitempty"`
	Reason   string         `json:"reason,omitempty"`
	Position int            `json:"position,omitempty"`
	Node     string         `json:"node,omitempty"`
	// Over is whether the job is over (not in the JSON: State says it).
	Over bool `json:"-"`
}

// Status reads a job's state as of everything logged so far and, while it
// waits, asks the scheduler why. It wraps ErrNoSuchJob for an id that is no
// job (a sweep's id is not: see SweepRecords).
func (c *Client) Status(ctx context.Context, job string) (Status, error) {
	rec, seq, err := c.FreshRecord(ctx, job)
	if err != nil {
		return Status{}, err
	}
	st := Status{ID: rec.Job, Name: rec.Name, State: rec.State, Outcome: rec.Outcome, Reason: rec.Reason, Node: rec.Node, Over: rec.Over()}
	if rec.State == hold.StateWaiting {
		if why, err := c.Why(ctx, rec.Job, seq); err == nil {
			st.Reason, st.Position = why.Reason, why.Position
		} else {
			st.Reason = "the scheduler did not say: " + err.Error()
		}
	}
	return st, nil
}

// Behind is how far the ledger had read when it answered: Applied of
// Last, for those told the log's sequences; for a submitter, only whether
// it was still catching up.
type Behind struct {
	Applied, Last uint64
	CatchingUp    bool
}

// Partial reports whether the answer may not show everything yet.
func (b Behind) Partial() bool { return b.Applied < b.Last || b.CatchingUp }

// AllRecords pages through the ledger's records as of now; it fails if the
// ledger has not read the log that far.
func (c *Client) AllRecords(ctx context.Context, q wire.ListRequest) ([]*hold.HoldRecord, error) {
	recs, _, err := c.Records(ctx, q, false)
	return recs, err
}

// Records pages through the ledger's records as of now. With partial, a
// ledger that is still catching up answers with what it has, and Behind
// says how far behind that is.
func (c *Client) Records(ctx context.Context, q wire.ListRequest, partial bool) ([]*hold.HoldRecord, Behind, error) {
	all := []*hold.HoldRecord{}
	st, err := c.RecordPages(ctx, q, partial, func(page []*hold.HoldRecord) error {
		all = append(all, page...)
		return nil
	})
	if err != nil {
		return nil, st, err
	}
	return all, st, nil
}

// RecordPages is Records a page at a time: each page is handed to page as
// it comes, and let go of after, so that what the caller holds is a page,
// not every record of the history. An error from page ends it.
func (c *Client) RecordPages(ctx context.Context, q wire.ListRequest, partial bool, page func([]*hold.HoldRecord) error) (Behind, error) {
	seq, fresh, err := c.asOfNow(ctx)
	if err != nil {
		return Behind{}, err
	}
	q.MinSeq, q.Fresh = seq, fresh
	st := Behind{Applied: seq, Last: seq}
	for {
		var reply wire.ListReply
		if err := c.request(ctx, c.ledger(wire.EndpointList), q, &reply, 30*time.Second); err != nil {
			return st, err
		}
		if reply.Error != "" {
			return st, kind(ErrInvalid, errors.New(reply.Error))
		}
		if reply.Applied < seq || reply.CatchingUp {
			if !partial {
				if reply.Applied < seq {
					return st, fmt.Errorf("the ledger is catching up: it has read the log up to #%d of #%d; try again", reply.Applied, seq)
				}
				return st, errors.New("the ledger is catching up; try again")
			}
			st.Applied, st.CatchingUp = min(st.Applied, reply.Applied), true
			// Take what it has, without waiting again per page.
			q.MinSeq, q.Fresh = 0, false
		}
		if len(reply.Records) > 0 {
			if err := page(reply.Records); err != nil {
				return st, err
			}
		}
		if !reply.More || len(reply.Records) == 0 {
			return st, nil
		}
		q.After = reply.Records[len(reply.Records)-1].Job
	}
}

// Totals asks what each submitter would be billed for the period q names
// (a submitter is told its own bill only), as of now.
func (c *Client) Totals(ctx context.Context, q wire.TotalsRequest) ([]wire.Totals, Behind, error) {
	seq, fresh, err := c.asOfNow(ctx)
	if err != nil {
		return nil, Behind{}, err
	}
	q.MinSeq, q.Fresh = seq, fresh
	var reply wire.TotalsReply
	if err := c.request(ctx, c.ledger(wire.EndpointTotals), q, &reply, 30*time.Second); err != nil {
		return nil, Behind{}, err
	}
	if reply.Error != "" {
		return nil, Behind{}, kind(ErrInvalid, errors.New(reply.Error))
	}
	return reply.Submitters, Behind{Applied: reply.Applied, Last: seq, CatchingUp: reply.CatchingUp}, nil
}
