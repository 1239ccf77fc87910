package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/codes"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/pkg/trace"
)

// Submit stages the job's local data (see Stage) and publishes its
// request. The id is new (time ordered), and the request is stored only if
// no event exists for it yet, so it can never land on another job. p shows
// the upload's progress; nil shows none.
//
// The submission is the root span of the job's trace, or a child of ctx's
// span (cmd/e31 continues its caller's TRACEPARENT): the request carries
// it, and every event of the job after it.
func (c *Client) Submit(ctx context.Context, job *jobfile.Job, p stage.Progress) (id string, err error) {
	ctx, span := trace.Tracer().Start(ctx, "submit", oteltrace.WithSpanKind(oteltrace.SpanKindProducer))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	spec, err := c.Stage(ctx, job, p)
	if err != nil {
		return "", err
	}
	u, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	id = u.String()
	span.SetAttributes(trace.KeyJob.String(id))
	req := events.JobRequested{Submitter: c.who.Name, Spec: spec}
	if _, err := c.Append(ctx, id, &req, bus.ExpectLast(0)); err != nil {
		if errors.Is(err, bus.ErrConflict) {
			return "", fmt.Errorf("job id %s is already in use; submit again", id)
		}
		if events.IsLogFull(err) {
			return "", logFull(fmt.Sprintf("submit %s", id), err)
		}
		return "", err
	}
	return id, nil
}

// SubmitSweep submits one job per value of job.Sweep, sharing the staged
// data: the jobs are <sweep id>-<index>. It returns the sweep's id and the
// jobs' ids.
func (c *Client) SubmitSweep(ctx context.Context, job *jobfile.Job, p stage.Progress) (string, []string, error) {
	spec, err := c.Stage(ctx, job, p)
	if err != nil {
		return "", nil, err
	}
	sweep := uuid.Must(uuid.NewV7()).String()
	members := make([]member, len(job.Sweep))
	for i, v := range job.Sweep {
		members[i] = member{id: fmt.Sprintf("%s-%d", sweep, i), spec: spec,
			point: events.SweepPoint{ID: sweep, Index: i, Count: len(job.Sweep), Value: v}}
	}
	// One span for the sweep: its jobs share the trace they were asked in.
	ctx, span := trace.Tracer().Start(ctx, "submit sweep", oteltrace.WithSpanKind(oteltrace.SpanKindProducer))
	defer span.End()
	ids, err := c.requestMembers(ctx, sweep, members, false)
	return sweep, ids, err
}

// logFull is the error for a request the log refused for want of room:
// nothing was stored, and nothing stored before was lost.
func logFull(what string, err error) error {
	return kind(ErrFull, fmt.Errorf("%s: %w: the server refused the request, and every job accepted before keeps its events; "+
		"the operator must give the log more room (e31 setup --log-max-bytes) before jobs are accepted again (%v)", what, events.ErrLogFull, err))
}

// Stage uploads the job's local data (job.Paths) into the client's data
// store, content addressed (what is stored is not sent again), and returns
// the spec to submit. Data that does not fit the submitter's max-data
// wraps ErrFull.
func (c *Client) Stage(ctx context.Context, job *jobfile.Job, p stage.Progress) (events.JobSpec, error) {
	spec := job.Spec
	spec.Data = append([]events.DataRef(nil), job.Spec.Data...)
	if len(job.Paths) > 0 {
		store, err := c.Store(ctx, c.who.Name)
		if err != nil {
			return spec, err
		}
		for i, path := range job.Paths {
			ref, err := stage.Upload(ctx, store, path, p)
			if errors.Is(err, stage.ErrFull) {
				return spec, c.dataFull(ctx, fmt.Sprintf("stage data %q from %s", spec.Data[i].Name, path))
			}
			if err != nil {
				return spec, fmt.Errorf("stage data %q from %s: %w", spec.Data[i].Name, path, err)
			}
			ref.Name = spec.Data[i].Name
			spec.Data[i] = ref
		}
	}
	return spec, nil
}

// Store is the data store of submitter: the client's own for staging, a
// job's submitter's for its output and logs.
func (c *Client) Store(ctx context.Context, submitter string) (stage.Store, error) {
	// A submitter may not make its bucket (a user who may create streams
	// could capture others' subjects): the operator does, or a service
	// when its first job needs it. Without credentials, or as the operator,
	// the client makes its own.
	create := c.who.Role != auth.Submitter && submitter == c.who.Name
	s, err := stage.NewTenants(c.js, create).For(ctx, submitter)
	if errors.Is(err, stage.ErrNoBucket) {
		return nil, fmt.Errorf("the data store of %s (%s) does not exist yet: the operator makes it with 'e31 setup --submitter %s'",
			submitter, events.DataBucketFor(submitter), submitter)
	}
	if err != nil {
		return nil, fmt.Errorf("the data store of %s: %w", submitter, err)
	}
	return s, nil
}

// dataFull is the error for staging that did not fit the submitter's
// max-data: which limit, how much the bucket holds, and what to do.
func (c *Client) dataFull(ctx context.Context, what string) error {
	name := c.who.Name
	held, bound := "", "its max-data"
	if st, err := c.js.Stream(ctx, "OBJ_"+events.DataBucketFor(name)); err == nil {
		info := st.CachedInfo()
		held = ", and holds " + HumanBytes(int64(info.State.Bytes))
		if info.Config.MaxBytes > 0 {
			bound = HumanBytes(info.Config.MaxBytes) + " (max-data)"
		}
	}
	return kind(ErrFull, fmt.Errorf("%s: the data store of %s is full: it may hold at most %s%s; nothing stored before was lost. "+
		"Delete what you no longer need (e31 data ls, e31 data rm ID) or ask the operator for more (e31 setup --submitter %s --max-data SIZE)",
		what, name, bound, held, name))
}

// HumanBytes writes a size for people: 512 B, 1.5 KiB, 2 GiB.
func HumanBytes(n int64) string { return hold.HumanBytes(n) }

// Cancel asks for a job to be stopped: its compute is released and its
// output so far returned. It returns the job's record as it was when
// asked; a job already over (rec.Over()) is left as it is.
func (c *Client) Cancel(ctx context.Context, job, reason string) (*hold.HoldRecord, error) {
	rec, err := c.Record(ctx, job)
	if err != nil {
		return nil, err
	}
	if rec.Over() {
		return rec, nil
	}
	if _, err := c.Append(ctx, rec.Job, &events.CancelRequested{By: c.who.Name, Reason: reason}); err != nil {
		return rec, err
	}
	return rec, nil
}
