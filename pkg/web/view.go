package web

import (
	"slices"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/metrics"
)

// keepOver is how many jobs that are over the view keeps for the list and
// the timeline; older ones are still shown from the ledger's record when a
// job's page is asked for, without their event times.
const keepOver = 5000

// keepMinutes is how far back the charts go.
const keepMinutes = 60

// view is the page's projection of the log: every live job and the latest
// ones over, with the events of each, the pool (by metrics.Projection, so
// the page and /metrics say the same), and a per-minute history for the
// charts. It is not safe for concurrent use: Page guards it.
type view struct {
	applied uint64
	jobs    map[string]*job
	// order is the jobs by submission, oldest first.
	order []*job
	over  int
	fig   *metrics.Projection
	// minutes is the history for the charts, oldest first, one per minute
	// of ce-time that saw an event.
	minutes []minute
}

// minute is what happened in one minute of the log.
type minute struct {
	At        time.Time
	Submitted int
	Finished  int
	// Waiting is the most jobs that waited at once during the minute.
	Waiting int
	// CPUHeld is the most cores held at once during the minute, CPUHeldEnd
	// those held at its last event, and CPU the cores the pool offered
	// then.
	CPUHeld, CPUHeldEnd, CPU float64
}

// job is what the page shows of one job.
type job struct {
	ID        string
	Name      string
	Submitter string
	Sweep     *events.SweepPoint
	State     string
	Outcome   events.Outcome
	Reason    string
	Attempt   int
	Node      string
	Request   events.Request
	Submitted time.Time
	Updated   time.Time
	// Trace is the W3C trace id of the job's events, when they carry a
	// traceparent.
	Trace    string
	Timeline []entry
}

// entry is one event on a job's timeline.
type entry struct {
	Seq    uint64
	Type   string
	Time   time.Time
	Detail string
}

// Status is the job's state, or for a job that is over, how it ended: what
// a person scanning the list wants to read.
func (j job) Status() string {
	if j.Outcome != "" && (j.State == hold.StateReleased || j.State == hold.StateRejected || j.State == hold.StateCancelled) {
		return string(j.Outcome)
	}
	return j.State
}

// Over reports whether the job has ended.
func (j job) Over() bool {
	switch j.State {
	case hold.StateReleased, hold.StateRejected, hold.StateCancelled:
		return true
	}
	return false
}

func newView() *view {
	return &view{jobs: map[string]*job{}, fig: metrics.NewProjection()}
}

// skip records a message that is not an event this version folds.
func (v *view) skip(seq uint64, unknown bool) {
	v.fig.Skip(seq, unknown)
	v.applied = max(v.applied, seq)
}

// apply folds one stored event in; traceparent is its header, if any.
// Events at or below the last applied sequence change nothing.
func (v *view) apply(env events.Envelope, traceparent string) {
	if env.Seq != 0 && env.Seq <= v.applied {
		return
	}
	v.applied = max(v.applied, env.Seq)
	at := env.Time
	// The minute first: a new one samples the one before as this event
	// found it.
	m := v.minute(at)
	v.fig.Apply(env)
	switch e := env.Event.(type) {
	case *events.NodeAnnounced, *events.NodeExpired:
		return
	case *events.JobRequested:
		v.add(env.Subject, e.Submitter, e.Spec, hold.StateSubmitted, at, m)
	case *events.JobSubmitted:
		if j := v.add(env.Subject, e.Submitter, e.Spec, hold.StateWaiting, at, m); j.State == hold.StateSubmitted {
			j.State = hold.StateWaiting
		}
	}
	j := v.jobs[env.Subject]
	if j == nil {
		return // a job requested and rejected at once, or forgotten
	}
	wasOver := j.Over()
	j.Updated = at
	if j.Trace == "" {
		j.Trace = traceID(traceparent)
	}
	if sender, ok := events.SenderOf(env.Event); ok && (env.Attempt() != j.Attempt || !events.FromHolder(env.Event, j.Node)) {
		// A node's word about an attempt it does not hold: shown, and
		// nothing of the job changed by it.
		j.Timeline = append(j.Timeline, entry{Seq: env.Seq, Type: events.Name(env.Type), Time: at,
			Detail: strings.Clone("set aside: from node " + sender + ", which does not hold attempt " + itoa(env.Attempt()))})
		return
	}
	detail := ""
	switch e := env.Event.(type) {
	case *events.JobRejected:
		j.State, j.Outcome, j.Reason, detail = hold.StateRejected, events.Rejected, e.Reason, e.Reason
	case *events.JobCancelled:
		j.State, j.Outcome, j.Reason, detail = hold.StateCancelled, events.Cancelled, e.Reason, e.Reason
	case *events.ComputeHeld:
		j.State, j.Attempt, j.Node = hold.StateHeld, e.Attempt, e.Node
		detail = holdText(e.Hold)
	case *events.RunStarted:
		j.State = hold.StateRunning
		detail = "on " + e.Node
		if e.Isolation != "" {
			detail += ", isolation " + string(e.Isolation)
		}
	case *events.RunStopped:
		j.State, j.Outcome, j.Reason = hold.StateStopped, e.Outcome, e.Reason
		detail = string(e.Outcome)
		if e.ExitCode != nil {
			detail += ", exit " + itoa(*e.ExitCode)
		}
		if e.Reason != "" {
			detail += ": " + e.Reason
		}
	case *events.HoldLost:
		j.State, j.Outcome, detail = hold.StateStopped, events.NodeLost, e.Reason
	case *events.HoldExpired:
		j.State, j.Outcome, detail = hold.StateStopped, events.LimitExceeded, e.Reason
	case *events.OutputReturned:
		j.State, j.Outcome = hold.StateReturned, e.Outcome
		detail = itoa(len(e.Files)) + " files, " + bytesText(e.Bytes)
		if e.Partial {
			detail += ", partial"
		}
	case *events.ComputeReleased:
		j.Outcome = e.Outcome
		j.State = hold.StateWaiting
		if e.Final {
			j.State = hold.StateReleased
		}
		detail = string(e.Outcome)
		if !e.Final {
			detail += ", to be held again"
		}
	case *events.CancelRequested:
		detail = "by " + e.By
	case *events.Deleted:
		detail = e.What + " (" + e.Cause + ")"
	}
	j.Timeline = append(j.Timeline, entry{Seq: env.Seq, Type: events.Name(env.Type), Time: at, Detail: strings.Clone(detail)})
	if !wasOver && j.Over() {
		m.Finished++
		v.over++
		v.forget()
	}
}

// sample notes the queue and the pool as they are now in the history's last
// minute. It copies the figures, so it is called once per batch of events
// read and at each new minute, not for every event: the charts' minutes
// show the most seen at those instants.
func (v *view) sample() {
	if len(v.minutes) == 0 {
		return
	}
	f := v.fig.Figures()
	m := &v.minutes[len(v.minutes)-1]
	m.Waiting = max(m.Waiting, f.Jobs[hold.StateWaiting])
	v.poolOf(m, f)
}

// add returns the job of id, making it in state if it is new.
func (v *view) add(id, submitter string, spec events.JobSpec, state string, at time.Time, m *minute) *job {
	if j := v.jobs[id]; j != nil {
		return j
	}
	// Strings decoded from a message share its buffer: what the view keeps
	// is copied, so that it keeps no message.
	j := &job{ID: strings.Clone(id), Name: strings.Clone(spec.Name), Submitter: strings.Clone(submitter),
		Sweep: spec.Sweep, Request: spec.Request, State: state, Submitted: at}
	v.jobs[j.ID] = j
	v.order = append(v.order, j)
	m.Submitted++
	return j
}

// poolOf notes the pool's cores in m.
func (v *view) poolOf(m *minute, f metrics.Figures) {
	held, cpu := 0.0, 0.0
	for _, n := range f.Nodes {
		if n.Announced && n.Up {
			cpu += n.Capacity.CPU
		}
		held += n.Held.CPU
	}
	m.CPUHeld, m.CPUHeldEnd, m.CPU = max(m.CPUHeld, held), held, cpu
}

// minute returns the history's minute of at, starting a new one if at is
// later than the last; an event older than the last minute (clocks differ
// between services) counts in the last.
func (v *view) minute(at time.Time) *minute {
	t := at.Truncate(time.Minute)
	if n := len(v.minutes); n > 0 && !t.After(v.minutes[n-1].At) {
		return &v.minutes[n-1]
	}
	m := minute{At: t}
	if n := len(v.minutes); n > 0 {
		// The minute before ends here: what it left is where this one
		// starts.
		v.sample()
		last := v.minutes[n-1]
		m.CPUHeld, m.CPUHeldEnd, m.CPU = last.CPUHeldEnd, last.CPUHeldEnd, last.CPU
		m.Waiting = v.fig.Figures().Jobs[hold.StateWaiting]
	}
	v.minutes = append(v.minutes, m)
	if len(v.minutes) > keepMinutes {
		v.minutes = slices.Delete(v.minutes, 0, len(v.minutes)-keepMinutes)
	}
	return &v.minutes[len(v.minutes)-1]
}

// forget drops the oldest jobs that are over once more than keepOver are
// kept, so that memory is bounded by the live jobs.
func (v *view) forget() {
	if v.over <= keepOver+keepOver/10 {
		return
	}
	kept := v.order[:0]
	drop := v.over - keepOver
	for _, j := range v.order {
		if drop > 0 && j.Over() {
			delete(v.jobs, j.ID)
			drop--
			v.over--
			continue
		}
		kept = append(kept, j)
	}
	clear(v.order[len(kept):])
	v.order = kept
}

// traceID is the trace id of a W3C traceparent (version-traceid-spanid-flags),
// or "" if it is not one.
func traceID(tp string) string {
	parts := strings.Split(strings.TrimSpace(tp), "-")
	if len(parts) < 4 || len(parts[1]) != 32 || strings.Trim(parts[1], "0123456789abcdef") != "" || strings.Trim(parts[1], "0") == "" {
		return ""
	}
	return parts[1]
}
