// Package audit rebuilds every hold record from the raw event log, checks
// that the log is whole, and compares the rebuilt records with the ledger's.
//
// It shares nothing with the ledger's projection but the event types: it
// reads raw stored messages, groups them by job, and derives each record
// from the job's whole history at once, where the ledger folds events one by
// one as they come. Two independent derivations that agree field by field
// are the evidence that the records follow from the log.
package audit

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/api"
	"github.com/e31net/e31/pkg/events"
)

// Raw is one stored message, as read from the server or from an export.
type Raw struct {
	Seq     uint64
	Subject string
	Headers nats.Header
	Body    []byte
}

// Finding is one thing wrong with the log or the ledger.
type Finding struct {
	Job    string `json:"job,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// Kinds of finding.
const (
	Undecodable = "undecodable"
	Duplicate   = "duplicate"
	Order       = "order"
	Unreleased  = "unreleased"
	Capacity    = "capacity"
	Mismatch    = "mismatch"
	MissingRec  = "missing_record"
	ExtraRec    = "extra_record"
)

// Report is what an audit found.
type Report struct {
	Events   int       `json:"events"`
	Jobs     int       `json:"jobs"`
	LastSeq  uint64    `json:"last_seq"`
	Findings []Finding `json:"findings"`
	// Moving counts jobs whose ledger record already includes events logged
	// after the audit read the log: they are not compared this time.
	Moving  int                        `json:"moving,omitempty"`
	Records map[string]*api.HoldRecord `json:"-"`
}

// OK reports whether nothing was found.
func (r *Report) OK() bool { return len(r.Findings) == 0 }

// Auditor accumulates the log, one message at a time, in log order.
type Auditor struct {
	rep    Report
	jobs   map[string][]events.Envelope
	order  []string
	ids    map[string]uint64
	nodes  map[string]*nodeUse
	lastAt map[string]uint64
}

type nodeUse struct{ capMilli, usedMilli, capMem, usedMem int64 }

// New returns an empty Auditor.
func New() *Auditor {
	return &Auditor{jobs: map[string][]events.Envelope{}, ids: map[string]uint64{}, nodes: map[string]*nodeUse{}}
}

// Add reads one message. Messages must come in log order.
func (a *Auditor) Add(m Raw) {
	a.rep.Events++
	if m.Seq > a.rep.LastSeq {
		a.rep.LastSeq = m.Seq
	}
	env, err := events.Decode(m.Subject, m.Headers, m.Body)
	if err != nil {
		a.find(Finding{Seq: m.Seq, Kind: Undecodable, Detail: err.Error()})
		return
	}
	env.Seq = m.Seq
	if prev, dup := a.ids[env.ID]; dup {
		a.find(Finding{Job: env.Subject, Seq: m.Seq, Kind: Duplicate, Detail: fmt.Sprintf("event id %s was already stored at #%d", env.ID, prev)})
		return
	}
	a.ids[env.ID] = env.Seq
	a.capacity(env)
	if _, isNode := env.Event.(*events.NodeAnnounced); isNode {
		return
	}
	if _, seen := a.jobs[env.Subject]; !seen {
		a.order = append(a.order, env.Subject)
	}
	a.jobs[env.Subject] = append(a.jobs[env.Subject], env)
}

// capacity tracks what is held on each node at every instant of the log.
func (a *Auditor) capacity(env events.Envelope) {
	switch e := env.Event.(type) {
	case *events.NodeAnnounced:
		n := a.node(e.Node)
		n.capMilli, n.capMem = int64(math.Round(e.CPU*1000)), e.MemoryBytes
	case *events.ComputeHeld:
		n := a.node(e.Node)
		n.usedMilli += int64(math.Round(e.CPU * 1000))
		n.usedMem += e.MemoryBytes
		if n.usedMilli > n.capMilli || n.usedMem > n.capMem {
			a.find(Finding{Job: env.Subject, Seq: env.Seq, Kind: Capacity, Detail: fmt.Sprintf(
				"node %s held beyond its capacity: %g of %g cpu, %d of %d bytes of memory",
				e.Node, float64(n.usedMilli)/1000, float64(n.capMilli)/1000, n.usedMem, n.capMem)})
		}
	case *events.ComputeReleased:
		n := a.node(e.Node)
		n.usedMilli -= int64(math.Round(e.CPU * 1000))
		n.usedMem -= e.MemoryBytes
	}
}

func (a *Auditor) node(name string) *nodeUse {
	n := a.nodes[name]
	if n == nil {
		n = &nodeUse{}
		a.nodes[name] = n
	}
	return n
}

func (a *Auditor) find(f Finding) { a.rep.Findings = append(a.rep.Findings, f) }

// Finish derives every job's record and checks each job's history.
func (a *Auditor) Finish() *Report {
	a.rep.Records = make(map[string]*api.HoldRecord, len(a.jobs))
	for _, id := range a.order {
		rec, findings := derive(id, a.jobs[id])
		a.rep.Records[id] = rec
		a.rep.Findings = append(a.rep.Findings, findings...)
	}
	a.rep.Jobs = len(a.jobs)
	return &a.rep
}

// step is where an event may come in an attempt's life, in order.
var step = map[string]int{
	events.TypeComputeHeld: 1, events.TypeRunStarted: 2, events.TypeRunStopped: 3,
	// A lost node's attempt ends with HoldLost instead of being stopped and
	// returned: it may follow the hold or the start, and only the release
	// may follow it.
	events.TypeHoldLost:       4,
	events.TypeOutputReturned: 4, events.TypeComputeReleased: 5,
}

// derive builds one job's record from its whole history and checks it.
func derive(job string, evs []events.Envelope) (*api.HoldRecord, []Finding) {
	var findings []Finding
	bad := func(e events.Envelope, kind, format string, args ...any) {
		findings = append(findings, Finding{Job: job, Seq: e.Seq, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	// A second request under a used id is refused by SUBMIT and is no part of the job.
	kept := evs[:0:0]
	for i, e := range evs {
		if e.Type == events.TypeJobRequested && i > 0 {
			continue
		}
		kept = append(kept, e)
	}
	rec := &api.HoldRecord{Job: job, Events: make([]api.EventRef, 0, len(kept)), Output: api.Output{Missing: []string{}}}
	for _, e := range kept {
		rec.Events = append(rec.Events, api.EventRef{Seq: e.Seq, Type: events.Name(e.Type)})
	}

	type attempt struct {
		a    api.Attempt
		last int
		ret  *events.OutputReturned
	}
	attempts := map[int]*attempt{}
	var numbers []int
	var submitted, ended *events.Envelope
	state := api.StateSubmitted
	for i := range kept {
		e := kept[i]
		t := e.Time.UTC()
		if ended != nil {
			bad(e, Order, "%s after the job ended with %s at #%d", events.Name(e.Type), events.Name(ended.Type), ended.Seq)
		}
		if h, ok := events.HoldOf(e.Event); ok {
			at := attempts[h.Attempt]
			if at == nil {
				if e.Type != events.TypeComputeHeld {
					bad(e, Order, "%s for attempt %d, which was never held", events.Name(e.Type), h.Attempt)
				}
				if submitted == nil {
					bad(e, Order, "compute held for a job that was never submitted")
				}
				at = &attempt{a: api.Attempt{Attempt: h.Attempt, Node: h.Node}}
				attempts[h.Attempt] = at
				numbers = append(numbers, h.Attempt)
			}
			if s := step[e.Type]; s <= at.last {
				bad(e, Order, "%s for attempt %d out of order", events.Name(e.Type), h.Attempt)
			} else {
				at.last = s
			}
			switch ev := e.Event.(type) {
			case *events.ComputeHeld:
				at.a.HeldAt, state = &t, api.StateHeld
			case *events.RunStarted:
				at.a.StartedAt, state = &t, api.StateRunning
			case *events.RunStopped:
				at.a.StoppedAt, state = &t, api.StateStopped
				at.a.ExitCode, at.a.Usage = ev.ExitCode, ev.Usage
				at.a.Outcome, at.a.Reason = ev.Outcome, ev.Reason
			case *events.HoldLost:
				state = api.StateStopped
				at.a.Outcome, at.a.Reason = events.NodeLost, ev.Reason
			case *events.OutputReturned:
				at.a.OutputReturnedAt, state = &t, api.StateReturned
				at.a.Outcome = ev.Outcome
				if ev.Reason != "" {
					at.a.Reason = ev.Reason
				}
				at.ret = ev
				rec.Output = outputOf(ev)
			case *events.ComputeReleased:
				at.a.ReleasedAt = &t
				if at.a.HeldAt != nil {
					at.a.HeldSeconds = t.Sub(*at.a.HeldAt).Seconds()
				}
				if at.a.Outcome == "" {
					at.a.Outcome = ev.Outcome
				}
				state = api.StateWaiting
				if ev.Final {
					state = api.StateReleased
					ended = &kept[i]
				}
			}
			continue
		}
		switch ev := e.Event.(type) {
		case *events.JobRequested:
			rec.Submitter, rec.Name, rec.Request, rec.Sweep = ev.Submitter, ev.Spec.Name, request(ev.Spec), ev.Spec.Sweep
		case *events.JobSubmitted:
			if submitted != nil {
				bad(e, Duplicate, "submitted again (first at #%d)", submitted.Seq)
			}
			submitted = &kept[i]
			rec.Submitter, rec.Name, rec.Request, rec.Sweep = ev.Submitter, ev.Spec.Name, request(ev.Spec), ev.Spec.Sweep
			rec.SubmittedAt, state = &t, api.StateWaiting
		case *events.JobRejected:
			state, rec.Outcome, rec.Reason = api.StateRejected, events.Rejected, ev.Reason
			ended = &kept[i]
		case *events.JobCancelled:
			state, rec.Outcome, rec.Reason = api.StateCancelled, events.Cancelled, ev.Reason
			ended = &kept[i]
		}
	}
	rec.State = state
	for _, n := range numbers {
		at := attempts[n]
		rec.Attempts = append(rec.Attempts, at.a)
		rec.HeldSeconds += at.a.HeldSeconds
		if ended != nil && at.a.ReleasedAt == nil {
			findings = append(findings, Finding{Job: job, Kind: Unreleased, Detail: fmt.Sprintf("attempt %d on %s was held and never released, but the job is over", n, at.a.Node)})
		}
	}
	if len(numbers) > 0 {
		last := rec.Attempts[len(rec.Attempts)-1]
		rec.Node, rec.HeldAt, rec.StartedAt, rec.StoppedAt = last.Node, last.HeldAt, last.StartedAt, last.StoppedAt
		rec.OutputReturnedAt, rec.ReleasedAt, rec.Usage, rec.ExitCode = last.OutputReturnedAt, last.ReleasedAt, last.Usage, last.ExitCode
		if last.Outcome != "" && state != api.StateRejected && state != api.StateCancelled {
			rec.Outcome, rec.Reason = last.Outcome, last.Reason
		}
	}
	return rec, findings
}

func outputOf(r *events.OutputReturned) api.Output {
	missing := r.Missing
	if missing == nil {
		missing = []string{}
	}
	return api.Output{Files: len(r.Files), Bytes: r.Bytes, Partial: r.Partial, Missing: missing, List: r.Files}
}

func request(s events.JobSpec) api.Request {
	return api.Request{CPU: s.Request.CPU, MemoryBytes: s.Request.MemoryBytes, GPU: s.Request.GPU, DiskBytes: s.Request.DiskBytes, LimitSeconds: s.Request.LimitSeconds}
}

// Compare checks the ledger's records against the rebuilt ones, field by
// field, and adds a finding for every difference.
func (r *Report) Compare(ledger []*api.HoldRecord) {
	seen := map[string]bool{}
	for _, l := range ledger {
		seen[l.Job] = true
		if n := len(l.Events); n > 0 && l.Events[n-1].Seq > r.LastSeq {
			r.Moving++
			continue
		}
		mine, ok := r.Records[l.Job]
		if !ok {
			r.Findings = append(r.Findings, Finding{Job: l.Job, Kind: ExtraRec, Detail: "the ledger has a record for a job with no events in the log"})
			continue
		}
		for _, d := range diff(toMap(l), toMap(mine), "") {
			r.Findings = append(r.Findings, Finding{Job: l.Job, Kind: Mismatch, Detail: d})
		}
	}
	ids := make([]string, 0, len(r.Records))
	for id := range r.Records {
		if !seen[id] && r.Moving == 0 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		r.Findings = append(r.Findings, Finding{Job: id, Kind: MissingRec, Detail: "the log has this job but the ledger has no record of it"})
	}
}

func toMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// diff lists the paths where ledger and audit disagree.
func diff(ledger, audit any, path string) []string {
	lm, lok := ledger.(map[string]any)
	am, aok := audit.(map[string]any)
	if lok && aok {
		keys := map[string]bool{}
		for k := range lm {
			keys[k] = true
		}
		for k := range am {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		var out []string
		for _, k := range sorted {
			out = append(out, diff(lm[k], am[k], join(path, k))...)
		}
		return out
	}
	ll, lok := ledger.([]any)
	al, aok := audit.([]any)
	if lok && aok && len(ll) == len(al) {
		var out []string
		for i := range ll {
			out = append(out, diff(ll[i], al[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	if closeEnough(ledger, audit) {
		return nil
	}
	return []string{fmt.Sprintf("%s: ledger has %s, the log gives %s", path, show(ledger), show(audit))}
}

// closeEnough compares leaves; seconds are compared to the microsecond,
// which is finer than any clock that stamped them.
func closeEnough(a, b any) bool {
	fa, aok := a.(float64)
	fb, bok := b.(float64)
	if aok && bok {
		return math.Abs(fa-fb) < 1e-6
	}
	return reflect.DeepEqual(a, b)
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func show(v any) string {
	if v == nil {
		return "nothing"
	}
	b, _ := json.Marshal(v)
	s := string(b)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// Summary is one line for people.
func (r *Report) Summary() string {
	if r.OK() {
		return fmt.Sprintf("audit passed: %d events, %d jobs, every record rebuilt from the log matches the ledger", r.Events, r.Jobs)
	}
	kinds := map[string]int{}
	for _, f := range r.Findings {
		kinds[f.Kind]++
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", n, strings.ReplaceAll(k, "_", " ")))
	}
	sort.Strings(parts)
	return fmt.Sprintf("audit FAILED: %d events, %d jobs: %s", r.Events, r.Jobs, strings.Join(parts, ", "))
}
