package ledger

import (
	"time"

	"github.com/e31net/e31/pkg/api"
	"github.com/e31net/e31/pkg/events"
)

// Projection folds the log into one hold record per job. Applying the same
// event twice, or an event at or below the last applied sequence, changes
// nothing. It is not safe for concurrent use.
type Projection struct {
	records map[string]*api.HoldRecord
	order   []string // jobs by their first event, for listing
	applied uint64
}

// NewProjection returns an empty projection.
func NewProjection() *Projection {
	return &Projection{records: map[string]*api.HoldRecord{}}
}

// Applied is the last sequence applied.
func (p *Projection) Applied() uint64 { return p.applied }

// Record returns the record of a job, or nil.
func (p *Projection) Record(job string) *api.HoldRecord { return p.records[job] }

// Apply folds one event in.
func (p *Projection) Apply(env events.Envelope) {
	if env.Seq != 0 && env.Seq <= p.applied {
		return
	}
	if env.Seq > p.applied {
		p.applied = env.Seq
	}
	if _, isNode := env.Event.(*events.NodeAnnounced); isNode {
		return
	}
	job := env.Subject
	r := p.records[job]
	if r == nil {
		r = &api.HoldRecord{Job: job, State: api.StateSubmitted, Output: api.Output{Missing: []string{}}, Events: []api.EventRef{}}
		p.records[job] = r
		p.order = append(p.order, job)
	} else if _, again := env.Event.(*events.JobRequested); again {
		// A second request under a used id is refused by SUBMIT; it is not
		// part of this job's record.
		return
	}
	r.Events = append(r.Events, api.EventRef{Seq: env.Seq, Type: events.Name(env.Type)})
	at := env.Time.UTC()
	switch e := env.Event.(type) {
	case *events.JobRequested:
		r.Submitter, r.Name, r.Request, r.Sweep = e.Submitter, e.Spec.Name, requestOf(e.Spec), e.Spec.Sweep
	case *events.JobSubmitted:
		r.Submitter, r.Name, r.Request, r.Sweep = e.Submitter, e.Spec.Name, requestOf(e.Spec), e.Spec.Sweep
		r.SubmittedAt = &at
		r.State = api.StateWaiting
	case *events.JobRejected:
		r.State, r.Outcome, r.Reason = api.StateRejected, events.Rejected, e.Reason
	case *events.JobCancelled:
		r.State, r.Outcome, r.Reason = api.StateCancelled, events.Cancelled, e.Reason
	case *events.ComputeHeld:
		a := p.attempt(r, e.Attempt)
		if a.HeldAt != nil {
			return
		}
		a.Node, a.HeldAt = e.Node, &at
		r.State = api.StateHeld
	case *events.RunStarted:
		p.attempt(r, e.Attempt).StartedAt = &at
		r.State = api.StateRunning
	case *events.RunStopped:
		a := p.attempt(r, e.Attempt)
		a.StoppedAt, a.Outcome, a.ExitCode, a.Reason, a.Usage = &at, e.Outcome, e.ExitCode, e.Reason, e.Usage
		r.State = api.StateStopped
	case *events.HoldLost:
		a := p.attempt(r, e.Attempt)
		a.Outcome, a.Reason = events.NodeLost, e.Reason
		r.State = api.StateStopped
	case *events.OutputReturned:
		a := p.attempt(r, e.Attempt)
		a.OutputReturnedAt, a.Outcome = &at, e.Outcome
		if e.Reason != "" {
			a.Reason = e.Reason
		}
		missing := e.Missing
		if missing == nil {
			missing = []string{}
		}
		r.Output = api.Output{Files: len(e.Files), Bytes: e.Bytes, Partial: e.Partial, Missing: missing, List: e.Files}
		r.State = api.StateReturned
	case *events.ComputeReleased:
		a := p.attempt(r, e.Attempt)
		if a.ReleasedAt != nil {
			return
		}
		a.ReleasedAt = &at
		if a.HeldAt != nil {
			a.HeldSeconds = at.Sub(*a.HeldAt).Seconds()
		}
		if a.Outcome == "" {
			a.Outcome = e.Outcome
		}
		r.State = api.StateReleased
		if !e.Final {
			r.State = api.StateWaiting
		}
	}
	p.summarize(r)
}

// attempt returns the record's entry for attempt n, making it if needed.
func (p *Projection) attempt(r *api.HoldRecord, n int) *api.Attempt {
	for i := range r.Attempts {
		if r.Attempts[i].Attempt == n {
			return &r.Attempts[i]
		}
	}
	r.Attempts = append(r.Attempts, api.Attempt{Attempt: n})
	return &r.Attempts[len(r.Attempts)-1]
}

// summarize copies the last attempt to the top of the record and totals the
// meter.
func (p *Projection) summarize(r *api.HoldRecord) {
	if len(r.Attempts) == 0 {
		return
	}
	last := r.Attempts[len(r.Attempts)-1]
	r.Node = last.Node
	r.HeldAt, r.StartedAt, r.StoppedAt = last.HeldAt, last.StartedAt, last.StoppedAt
	r.OutputReturnedAt, r.ReleasedAt = last.OutputReturnedAt, last.ReleasedAt
	r.Usage, r.ExitCode = last.Usage, last.ExitCode
	if last.Outcome != "" && r.State != api.StateCancelled && r.State != api.StateRejected {
		r.Outcome, r.Reason = last.Outcome, last.Reason
	}
	var total float64
	for _, a := range r.Attempts {
		total += a.HeldSeconds
	}
	r.HeldSeconds = total
}

func requestOf(s events.JobSpec) api.Request {
	return api.Request{CPU: s.Request.CPU, MemoryBytes: s.Request.MemoryBytes, GPU: s.Request.GPU,
		DiskBytes: s.Request.DiskBytes, LimitSeconds: s.Request.LimitSeconds}
}

// List returns records matching q in the order their jobs first appeared,
// and whether more follow.
func (p *Projection) List(q api.ListRequest) ([]*api.HoldRecord, bool) {
	limit := q.Limit
	// A page must fit in one NATS message (1 MiB): records run to a few KiB.
	if limit <= 0 || limit > 200 {
		limit = 200
	}
	start := 0
	if q.After != "" {
		for i, id := range p.order {
			if id == q.After {
				start = i + 1
				break
			}
		}
	}
	var out []*api.HoldRecord
	for i := start; i < len(p.order); i++ {
		r := p.records[p.order[i]]
		if !matches(r, q) {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, r)
	}
	return out, false
}

func matches(r *api.HoldRecord, q api.ListRequest) bool {
	if q.Submitter != "" && r.Submitter != q.Submitter {
		return false
	}
	if q.Sweep != "" && (r.Sweep == nil || r.Sweep.ID != q.Sweep) {
		return false
	}
	if q.Node != "" {
		found := false
		for _, a := range r.Attempts {
			found = found || a.Node == q.Node
		}
		if !found {
			return false
		}
	}
	if !q.Since.IsZero() || !q.Until.IsZero() {
		t := firstTime(r)
		if t == nil || (!q.Since.IsZero() && t.Before(q.Since)) || (!q.Until.IsZero() && !t.Before(q.Until)) {
			return false
		}
	}
	return true
}

func firstTime(r *api.HoldRecord) *time.Time {
	if r.SubmittedAt != nil {
		return r.SubmittedAt
	}
	return r.HeldAt
}
