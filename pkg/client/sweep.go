package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/pkg/trace"
)

// A sweep's id works wherever a job's does, as an array's does in Slurm:
// its status and wait summarise its members, its output is each member's
// under a folder per index, its cancel is one event that stops every
// member (events.CancelRequested with Sweep), its failed members' logs
// come together, and the members that did not succeed can be submitted
// again into the same sweep (SubmitAgain).
//
// A point of the sweep (an index) may have several members: the first,
// and one per round it was submitted again in (events.SweepPoint.Again).
// The member of the highest round is the point's: it is what status,
// wait and output count.

// Points returns the member that counts for each point of a sweep, in
// index order: of the members at one index, the one of the highest round.
// A record that names no point (none of a sweep's does) counts as one of
// its own, after the others.
func Points(recs []*hold.HoldRecord) []*hold.HoldRecord {
	latest := map[int]*hold.HoldRecord{}
	var loose []*hold.HoldRecord
	for _, r := range recs {
		if r.Sweep == nil {
			loose = append(loose, r)
			continue
		}
		if cur := latest[r.Sweep.Index]; cur == nil || later(r, cur) {
			latest[r.Sweep.Index] = r
		}
	}
	out := make([]*hold.HoldRecord, 0, len(latest))
	for _, r := range latest {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *hold.HoldRecord) int { return a.Sweep.Index - b.Sweep.Index })
	return append(out, loose...)
}

// later reports whether a is a later member of its point than b: of a
// later round, or, of one round (which SubmitAgain never makes twice for a
// point), the greater id.
func later(a, b *hold.HoldRecord) bool {
	if a.Sweep.Again != b.Sweep.Again {
		return a.Sweep.Again > b.Sweep.Again
	}
	return a.Job > b.Job
}

// latestRound is the highest round of resubmission among a sweep's
// members: 0 if none was submitted again.
func latestRound(recs []*hold.HoldRecord) int {
	round := 0
	for _, r := range recs {
		if r.Sweep != nil {
			round = max(round, r.Sweep.Again)
		}
	}
	return round
}

// sweepRecords reads every record of a sweep as of now, and fails with
// ErrNoSuchJob if there is none: the id is no sweep of the asker's.
func (c *Client) sweepRecords(ctx context.Context, sweep string) ([]*hold.HoldRecord, error) {
	if err := validJob(sweep); err != nil {
		return nil, err
	}
	recs, err := c.SweepRecords(ctx, sweep)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoSuchJob, sweep)
	}
	return recs, nil
}

// SweepCancel is what CancelSweep asked: how many of the sweep's points
// were not over when it asked (0: nothing was asked, the sweep is over).
type SweepCancel struct {
	Sweep  string `json:"sweep"`
	Points int    `json:"points"`
	Live   int    `json:"live"`
}

// CancelSweep asks for every member of a sweep that is not over to be
// stopped, in one event (events.CancelRequested with Sweep): RENT cancels
// the members that wait, each node stops those it holds, and members of a
// submission still under way are cancelled as they come. It is one
// request, stored whole or not at all: a client that dies after it cannot
// leave half the sweep running. Members submitted again after it, in a
// later round (SubmitAgain), are not stopped by it. A sweep all of whose
// members are over is left as it is.
func (c *Client) CancelSweep(ctx context.Context, sweep, reason string) (SweepCancel, error) {
	recs, err := c.sweepRecords(ctx, sweep)
	if err != nil {
		return SweepCancel{}, err
	}
	points := Points(recs)
	res := SweepCancel{Sweep: sweep, Points: len(points)}
	for _, r := range recs {
		if !r.Over() {
			res.Live++
		}
	}
	if res.Live == 0 {
		return res, nil
	}
	ev := &events.CancelRequested{By: c.who.Name, Reason: reason, Sweep: true, Round: latestRound(recs)}
	if err := c.appendRepeatable(ctx, sweep, ev); err != nil {
		return res, err
	}
	return res, nil
}

// appendRepeatable records ev, a request that may be stored twice and
// change nothing twice (a sweep's cancel), about id. A publish the server
// takes for a repeat of one stored under the same Nats-Msg-Id in the
// duplicate window is published again without it: a submitter may not
// read the log to tell its own earlier request from one another tenant
// forged under the same id on its own tail (bus.Publisher would ask, and
// wait in vain), and taking a forgery for its own would drop the request.
func (c *Client) appendRepeatable(ctx context.Context, id string, ev events.Event) error {
	env := events.New(id, ev, "e31/cli", time.Now())
	env.Trace = trace.Of(ctx)
	m, err := env.Msg()
	if err != nil {
		return kind(ErrInvalid, err)
	}
	gctx, done := c.Guard(ctx, m.Subject)
	defer done()
	ack, err := c.js.PublishMsg(gctx, m)
	if err == nil && ack.Duplicate {
		m.Header.Del(nats.MsgIdHdr)
		_, err = c.js.PublishMsg(gctx, m)
	}
	if err != nil {
		return c.refused(gctx, fmt.Sprintf("%s of %s", events.Name(ev.Type()), id), err)
	}
	return nil
}

// Again is what SubmitAgain submitted: the round, each new member's id by
// its index, and how many points it left alone because they had not
// ended yet.
type Again struct {
	Sweep   string   `json:"sweep"`
	Round   int      `json:"round"`
	Jobs    []string `json:"jobs"`
	Running int      `json:"not_over"`
}

// SubmitAgain submits again the points of a sweep whose member did not
// succeed (failed, cancelled, lost, past a limit, rejected…), as members
// of the same sweep at the same index: each with the round (the sweep's
// latest plus one) and the member it replaces (events.SweepPoint), as
// <sweep>-<index>-a<round>. Their output then joins the sweep's
// (OutputSweep). Points not over yet are left alone.
//
// With job nil, each member is submitted as the one it replaces was (its
// declaration and staged data, as SUBMIT accepted them). With a job file,
// that is submitted instead, its data staged again (what is stored is not
// sent again); its sweep, if it has one, must have as many values as the
// sweep has points, and gives each point its value; without one, each
// point keeps its value.
//
// Each new member's id is fixed by its point and round, and its request
// is stored only if the id is new: two SubmitAgain at once submit each
// point once.
func (c *Client) SubmitAgain(ctx context.Context, sweep string, job *jobfile.Job, p stage.Progress) (Again, error) {
	recs, err := c.sweepRecords(ctx, sweep)
	if err != nil {
		return Again{}, err
	}
	res := Again{Sweep: sweep, Round: latestRound(recs) + 1, Jobs: []string{}}
	var again []*hold.HoldRecord
	for _, r := range Points(recs) {
		switch {
		case !r.Over():
			res.Running++
		case r.Outcome != events.Succeeded:
			again = append(again, r)
		}
	}
	if len(again) == 0 {
		return res, nil
	}
	var fromFile *events.JobSpec
	if job != nil {
		if job.Sweep != nil && len(job.Sweep) != again[0].Sweep.Count {
			return res, kind(ErrInvalid, fmt.Errorf("sweep %s has %d points, but the job file's sweep has %d values", sweep, again[0].Sweep.Count, len(job.Sweep)))
		}
		spec, err := c.Stage(ctx, job, p)
		if err != nil {
			return res, err
		}
		fromFile = &spec
	}
	specs := make([]events.JobSpec, len(again))
	if fromFile == nil {
		// Each as it was: the members of a round submitted again without
		// a file come from several rounds, and so from several files.
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(8)
		for i, r := range again {
			g.Go(func() (err error) {
				specs[i], err = c.submittedSpec(gctx, r.Job)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return res, err
		}
	}
	members := make([]member, 0, len(again))
	for i, r := range again {
		spec := specs[i]
		if fromFile != nil {
			spec = *fromFile
		}
		point := *r.Sweep
		if job != nil && job.Sweep != nil {
			point.Value = job.Sweep[point.Index]
		}
		point.Again, point.AgainOf = res.Round, r.Job
		members = append(members, member{id: fmt.Sprintf("%s-%d-a%d", sweep, point.Index, res.Round), spec: spec, point: point})
	}
	ids, err := c.requestMembers(ctx, sweep, members, true)
	res.Jobs = ids
	return res, err
}

// submittedSpec is the declaration SUBMIT accepted for job, read from the
// job's events through the ledger.
func (c *Client) submittedSpec(ctx context.Context, job string) (events.JobSpec, error) {
	var spec *events.JobSpec
	err := c.Events(ctx, job, false, func(e wire.StoredEvent) error {
		if t := e.Headers[events.HeaderType]; spec != nil || len(t) == 0 || t[0] != events.TypeJobSubmitted {
			return nil
		}
		var sub events.JobSubmitted
		if err := json.Unmarshal(e.Body, &sub); err != nil {
			return fmt.Errorf("the submission of %s: %w", job, err)
		}
		spec = &sub.Spec
		return nil
	})
	if err != nil {
		return events.JobSpec{}, err
	}
	if spec == nil {
		return events.JobSpec{}, kind(ErrInvalid, fmt.Errorf("job %s was never submitted: it cannot be submitted again as it was (give a job file)", job))
	}
	spec.Sweep = nil
	return *spec, nil
}

// member is one job of a sweep to request.
type member struct {
	id    string
	spec  events.JobSpec
	point events.SweepPoint
}

// sweepBatch is how many of a sweep's requests go in one batch.
const sweepBatch = 512

// requestMembers publishes the requests of a sweep's members, sweepBatch
// at a time, each only if its id is new, and returns the ids of those it
// stored. With skipTaken, a member whose id is taken already (another
// SubmitAgain of the same round stored it) is left out rather than an
// error.
func (c *Client) requestMembers(ctx context.Context, sweep string, members []member, skipTaken bool) ([]string, error) {
	pub := bus.NewPublisher(c.js, "e31/cli", nil)
	tc := trace.Of(ctx)
	ids := make([]string, 0, len(members))
	for start := 0; start < len(members); start += sweepBatch {
		end := min(start+sweepBatch, len(members))
		batch := make([]bus.Pending, 0, end-start)
		subjects := make([]string, 0, end-start)
		for _, m := range members[start:end] {
			spec := m.spec
			spec.Sweep = &m.point
			batch = append(batch, bus.Pending{Subject: m.id, Event: &events.JobRequested{Submitter: c.who.Name, Spec: spec}, ExpectSet: true, Trace: tc})
			subjects = append(subjects, events.RequestSubject(m.id, c.who.Name))
		}
		gctx, done := c.Guard(ctx, subjects...)
		_, errs := pub.AppendBatch(gctx, batch)
		var failed []error
		for i, err := range errs {
			switch {
			case err == nil:
				ids = append(ids, members[start+i].id)
			case skipTaken && errors.Is(err, bus.ErrConflict):
			default:
				failed = append(failed, err)
			}
		}
		err := errors.Join(failed...)
		if err != nil {
			what := fmt.Sprintf("submit sweep %s (%d of %d jobs submitted)", sweep, len(ids), len(members))
			if events.IsLogFull(err) {
				err = logFull(what, err)
			} else {
				err = c.refused(gctx, what, err)
			}
		}
		done()
		if err != nil {
			return ids, err
		}
	}
	return ids, nil
}
