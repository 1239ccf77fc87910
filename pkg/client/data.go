package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
)

// What a job keeps in the store (its staged data and its output) lives
// until its retention passes or its submitter deletes it. A deletion is a
// request in the job's log, and OUTPUT, which owns the store, records the
// deletion when it is done.

// Stored asks OUTPUT what jobs keep, as of everything logged so far.
func (c *Client) Stored(ctx context.Context, q wire.StoredRequest) ([]wire.Stored, error) {
	seq, fresh, err := c.asOfNow(ctx)
	if err != nil {
		return nil, err
	}
	q.MinSeq, q.Fresh = seq, fresh
	var all []wire.Stored
	for {
		var reply wire.StoredReply
		if err := c.request(ctx, wire.OutputStoredSubject(c.who.User), q, &reply, 15*time.Second); err != nil {
			return nil, err
		}
		if reply.Error != "" {
			return nil, errors.New(reply.Error)
		}
		all = append(all, reply.Jobs...)
		if !reply.More || len(reply.Jobs) == 0 {
			return all, nil
		}
		q.After = reply.Jobs[len(reply.Jobs)-1].Job
	}
}

// Deletion is what Delete did about one job.
type Deletion struct {
	Job string
	// Nothing: the job keeps nothing in the store.
	Nothing bool
	// Parts are the parts asked for (events.WhatData, events.WhatOutput),
	// in that order, each with what was found.
	Parts []DeletionPart
	// Later: the job is not over; what was requested is deleted when it
	// ends.
	Later bool
	// Deleted are the deletions recorded, as they were recorded.
	Deleted []*events.Deleted
}

// DeletionPart is one part of a job's store and what Delete found of it.
type DeletionPart struct {
	What string
	// DeletedAt is set if it was deleted before.
	DeletedAt *time.Time
	// None: the job is over and has none of it stored.
	None bool
	// Requested: its deletion was requested now.
	Requested bool
}

// Delete asks OUTPUT to delete what a job keeps (what: events.WhatData,
// events.WhatOutput or events.WhatAll) and, if the job is over, waits up to
// timeout until the deletions are in the log. The Deletion says what it
// did, also when it fails part way.
func (c *Client) Delete(ctx context.Context, job, what, reason string, timeout time.Duration) (Deletion, error) {
	d := Deletion{Job: job}
	if err := validJob(job); err != nil {
		return d, err
	}
	found, err := c.Stored(ctx, wire.StoredRequest{Job: job, Deleted: true})
	if err != nil {
		return d, err
	}
	if len(found) == 0 {
		d.Nothing = true
		return d, nil
	}
	st := found[0]
	var todo []string
	for _, w := range []string{events.WhatData, events.WhatOutput} {
		part := st.Data
		if w == events.WhatOutput {
			part = st.Output
		}
		p := DeletionPart{What: w}
		switch {
		case what != events.WhatAll && what != w:
			continue
		case part.DeletedAt != nil:
			p.DeletedAt = part.DeletedAt
		case part.Files == 0 && st.Over:
			p.None = true
		default:
			p.Requested = true
			todo = append(todo, w)
		}
		d.Parts = append(d.Parts, p)
	}
	if len(todo) == 0 {
		return d, nil
	}
	ask := what
	if len(todo) == 1 {
		ask = todo[0]
	}
	if _, err := c.Append(ctx, job, &events.DeleteRequested{What: ask, By: c.who.Name, Reason: reason}); err != nil {
		return d, err
	}
	if !st.Over {
		d.Later = true
		return d, nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	left := map[string]bool{}
	for _, w := range todo {
		left[w] = true
	}
	err = c.FollowJob(wctx, job, false, func(m wire.StoredEvent) bool {
		env, err := Decode(m)
		if err != nil {
			return true
		}
		if del, ok := env.Event.(*events.Deleted); ok && left[del.What] {
			delete(left, del.What)
			d.Deleted = append(d.Deleted, del)
		}
		return len(left) > 0
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return d, fmt.Errorf("job %s: deletion requested, but not recorded within %s: is the output service running?", job, timeout)
	}
	return d, err
}

// HasOutput returns nil if the job has returned output, and an error
// wrapping ErrNoOutput that says why not otherwise.
func HasOutput(rec *hold.HoldRecord) error {
	switch rec.State {
	case hold.StateReturned, hold.StateReleased:
		return nil
	case hold.StateRejected, hold.StateCancelled:
		return kind(ErrNoOutput, fmt.Errorf("job %s was %s: it has no output", rec.Job, rec.State))
	}
	return kind(ErrNoOutput, fmt.Errorf("job %s is %s: its output is returned when it stops (e31 wait %s)", rec.Job, rec.State, rec.Job))
}

// Output writes a job's returned output into dir, checking every file
// against its digest: the folder its manifest names, or, for output
// returned before manifests, the files its record lists. Output that is
// not there, or that cannot be written whole, wraps ErrNoOutput.
func (c *Client) Output(ctx context.Context, rec *hold.HoldRecord, dir string, p stage.Progress) error {
	if err := HasOutput(rec); err != nil {
		return err
	}
	if at := rec.Output.DeletedAt; at != nil {
		return kind(ErrNoOutput, fmt.Errorf("job %s: its output was deleted at %s", rec.Job, at.UTC().Format(time.RFC3339)))
	}
	s, err := c.Store(ctx, rec.Submitter)
	if err != nil {
		return err
	}
	if out := rec.Output; out.Manifest != "" {
		err = stage.FetchDir(ctx, s, out.Manifest, dir, p)
	} else {
		err = stage.Fetch(ctx, s, out.List, dir, p)
	}
	if err != nil {
		return kind(ErrNoOutput, fmt.Errorf("output of %s: %w", rec.Job, err))
	}
	return nil
}
