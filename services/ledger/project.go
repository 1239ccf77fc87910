package ledger

import (
	"crypto/sha256"
	"hash"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
)

// gib is the unit of memory in the meter: memory_gib_seconds.
const gib = 1 << 30

// Projection folds the log into one hold record per job. Applying the same
// event twice, or an event at or below the last applied sequence, changes
// nothing. It is not safe for concurrent use.
//
// Fed stored messages (ApplyStored, ApplyPrepared), it also keeps the hash
// chain over the log and the digests of the events behind every record; fed
// decoded events (Apply), it builds the same records without them.
type Projection struct {
	records map[string]*hold.HoldRecord
	jobs    map[string]*jobState
	order   []string       // jobs by their first event, for listing
	pos     map[string]int // each job's place in order, for paging
	applied uint64
	// owners is the submitter of each job the log has a message of: the
	// identity that ends the subject of the job's first message, if that
	// is a request ("" otherwise). The server binds that token to who
	// published it, so it says whose the job is even when the request's
	// body cannot be read, and nothing logged later changes it.
	owners map[string]string

	chain   hashChain
	read    uint64 // messages hashed into the chain
	skipped uint64 // messages that are not events this version knows
	gaps    uint64 // times a message's sequence did not follow the last one
}

// jobState is what the projection keeps about a job beyond its record.
type jobState struct {
	ids    []string  // the ce-id of every event listed in the record
	digest hash.Hash // running SHA-256 over the listed events' digests
}

// NewProjection returns an empty projection.
func NewProjection() *Projection {
	return &Projection{records: map[string]*hold.HoldRecord{}, jobs: map[string]*jobState{}, pos: map[string]int{}, owners: map[string]string{}}
}

// Applied is the last sequence applied.
func (p *Projection) Applied() uint64 { return p.applied }

// Record returns the record of a job, or nil.
func (p *Projection) Record(job string) *hold.HoldRecord { return p.records[job] }

// Owner is the submitter whose job this is, "" if the log says of no one:
// see Projection.owners. A job whose first message is no request (written
// by the operator) belongs to the submitter its record names.
func (p *Projection) Owner(job string) string {
	if o := p.owners[job]; o != "" {
		return o
	}
	if r := p.records[job]; r != nil {
		return r.Submitter
	}
	return ""
}

// Known reports whether the log has any message of job.
func (p *Projection) Known(job string) bool {
	_, ok := p.owners[job]
	return ok
}

// noteOwner records whose job a message's subject says it is, if it is the
// job's first message. It runs for every message of a rebuild: past the
// first of a job it costs one map lookup and allocates nothing.
func (p *Projection) noteOwner(subject string) {
	s, err := events.ParseSubject(subject)
	if err != nil || s.Space != events.SpaceJob {
		return
	}
	if _, seen := p.owners[s.Job]; seen {
		return
	}
	owner := ""
	if s.IsRequest() {
		owner = strings.Clone(s.Identity)
	}
	p.owners[strings.Clone(s.Job)] = owner
}

// Len is the number of records.
func (p *Projection) Len() int { return len(p.records) }

// Head is the hash chain over every stored message applied so far; empty
// for a projection fed only decoded events.
func (p *Projection) Head() chain.Head { return p.chain.head() }

// Stored is one message exactly as the stream holds it.
type Stored struct {
	Seq     uint64
	Subject string
	Header  nats.Header
	Data    []byte
}

// Prepared is a stored message digested and decoded, ready to be applied
// in log order. Preparing is the costly part of applying and needs nothing
// but the message, so messages are prepared in parallel.
type Prepared struct {
	seq     uint64
	subject string
	digest  [32]byte
	env     events.Envelope
	err     error
}

// Prepare digests and decodes m. It is safe to call concurrently.
func Prepare(m Stored) Prepared {
	x := Prepared{seq: m.Seq, subject: m.Subject, digest: eventDigest(m.Seq, m.Subject, m.Header, m.Data)}
	x.env, x.err = events.Decode(m.Subject, m.Header, m.Data)
	x.env.Seq = m.Seq
	return x
}

// ApplyStored applies one stored message: see ApplyPrepared.
func (p *Projection) ApplyStored(m Stored) { p.ApplyPrepared(Prepare(m)) }

// ApplyPrepared moves the chain past a prepared message and folds its event
// in. A message that does not decode is in the chain but in no record:
// nobody can say what it means, but nobody may remove it unseen either.
func (p *Projection) ApplyPrepared(x Prepared) {
	if x.seq <= p.applied {
		return
	}
	if p.applied > 0 && x.seq != p.applied+1 {
		p.gaps++
	}
	p.chain.add(x.seq, x.digest)
	p.read++
	p.applied = x.seq
	p.noteOwner(x.subject)
	if x.err != nil {
		p.skipped++
		return
	}
	p.fold(x.env, &x.digest)
}

// Apply folds one decoded event in. It does not move the chain: use it for
// events whose stored bytes are not at hand, never mixed with ApplyStored.
func (p *Projection) Apply(env events.Envelope) {
	if env.Seq != 0 && env.Seq <= p.applied {
		return
	}
	if env.Seq > p.applied {
		p.applied = env.Seq
	}
	subject := env.NATSSubject
	if subject == "" {
		subject, _ = events.SubjectOf(env.Subject, env.Event)
	}
	p.noteOwner(subject)
	p.fold(env, nil)
}

// fold adds one event to its job's record.
//
// The rules, which the audit derives again from the written definition:
// node events are in no record; an event the job's log already holds (the
// same ce-id, stored again after the duplicate window) is listed but
// changes nothing, except a repeated JobRequested, a client's request
// under a used id, which SUBMIT refuses and which is no part of the job.
func (p *Projection) fold(env events.Envelope, digest *[32]byte) {
	if isNodeEvent(env) {
		return
	}
	job := env.Subject
	r, js := p.records[job], p.jobs[job]
	if r == nil {
		// Strings decoded from headers share the message's header block:
		// what the projection keeps is copied, so that it keeps no message.
		job = strings.Clone(job)
		r = &hold.HoldRecord{Job: job, State: hold.StateSubmitted, Output: hold.Output{Missing: []string{}}, Events: []hold.EventRef{}}
		js = &jobState{}
		p.records[job], p.jobs[job] = r, js
		p.pos[job] = len(p.order)
		p.order = append(p.order, job)
	}
	repeated := false
	for _, id := range js.ids {
		repeated = repeated || id == env.ID
	}
	if repeated && env.Type == events.TypeJobRequested {
		return
	}
	js.ids = append(js.ids, strings.Clone(env.ID))
	ref := hold.EventRef{Seq: env.Seq, Type: events.Name(env.Type)}
	if digest != nil {
		if js.digest == nil {
			js.digest = sha256.New()
		}
		js.digest.Write(digest[:])
		ref.Digest = sha256Text(digest[:])
		r.EventsDigest = sha256Text(js.digest.Sum(nil))
	}
	r.Events = append(r.Events, ref)
	if repeated {
		return
	}
	at := env.Time.UTC()
	switch e := env.Event.(type) {
	case *events.JobRequested:
		// Only the job's first request says what was asked: a later one
		// (under another id, so not a repeat) is out of order, and the
		// audit reports it; it changes nothing here.
		if r.Submitter == "" && r.SubmittedAt == nil {
			r.Submitter, r.Name, r.Request, r.Sweep = e.Submitter, e.Spec.Name, requestOf(e.Spec), e.Spec.Sweep
		}
	case *events.JobSubmitted:
		r.Submitter, r.Name, r.Request, r.Sweep = e.Submitter, e.Spec.Name, requestOf(e.Spec), e.Spec.Sweep
		r.SubmittedAt = &at
		r.State = hold.StateWaiting
	case *events.JobRejected:
		r.State, r.Outcome, r.Reason = hold.StateRejected, events.Rejected, e.Reason
	case *events.JobCancelled:
		r.State, r.Outcome, r.Reason = hold.StateCancelled, events.Cancelled, e.Reason
	case *events.Deleted:
		if e.What == events.WhatOutput {
			r.Output.DeletedAt = &at
		} else {
			r.DataDeletedAt = &at
		}
	case *events.ComputeHeld:
		a := p.attempt(r, e.Attempt)
		a.Node, a.HeldAt = e.Node, &at
		a.Held = hold.Resources{CPU: e.CPU, MemoryBytes: e.MemoryBytes, GPU: e.GPU, DiskBytes: e.DiskBytes}
		r.State = hold.StateHeld
	case *events.RunStarted:
		p.attempt(r, e.Attempt).StartedAt = &at
		r.Isolation = e.Isolation // the last start's: see hold.HoldRecord
		r.State = hold.StateRunning
	case *events.RunStopped:
		a := p.attempt(r, e.Attempt)
		a.StoppedAt, a.Outcome, a.ExitCode, a.Reason, a.Usage, a.Logs = &at, e.Outcome, e.ExitCode, e.Reason, e.Usage, e.Logs
		r.State = hold.StateStopped
	case *events.HoldLost:
		a := p.attempt(r, e.Attempt)
		a.Outcome, a.Reason = events.NodeLost, e.Reason
		r.State = hold.StateStopped
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
		r.Output = hold.Output{Files: e.FileCount(), Bytes: e.Bytes, Partial: e.Partial, Missing: missing, List: e.Files, Manifest: e.Manifest}
		r.State = hold.StateReturned
	case *events.ComputeReleased:
		a := p.attempt(r, e.Attempt)
		a.ReleasedAt = &at
		if a.HeldAt != nil {
			meter(a, at.Sub(*a.HeldAt).Seconds())
		}
		if a.Outcome == "" {
			a.Outcome = e.Outcome
		}
		r.State = hold.StateReleased
		if !e.Final {
			r.State = hold.StateWaiting
		}
	}
	p.summarize(r)
}

// meter sets an attempt's meter for held seconds: the resources it held
// times the time it held them.
func meter(a *hold.Attempt, held float64) {
	a.HeldSeconds = held
	a.CPUCoreSeconds = a.Held.CPU * held
	a.MemoryGiBSeconds = float64(a.Held.MemoryBytes) / gib * held
	a.GPUSeconds = float64(a.Held.GPU) * held
}

// isNodeEvent reports whether env is about a node rather than a job.
func isNodeEvent(env events.Envelope) bool {
	subject := env.NATSSubject
	if subject == "" {
		subject, _ = events.SubjectOf(env.Subject, env.Event)
	}
	s, err := events.ParseSubject(subject)
	return err == nil && s.Space == events.SpaceNode
}

// attempt returns the record's entry for attempt n, making it if needed.
func (p *Projection) attempt(r *hold.HoldRecord, n int) *hold.Attempt {
	for i := range r.Attempts {
		if r.Attempts[i].Attempt == n {
			return &r.Attempts[i]
		}
	}
	r.Attempts = append(r.Attempts, hold.Attempt{Attempt: n})
	return &r.Attempts[len(r.Attempts)-1]
}

// summarize copies the last attempt to the top of the record and totals the
// meter. The outcome is the last attempt's, even when it has none yet: a
// job held again after a lost node is not node_lost while it runs.
func (p *Projection) summarize(r *hold.HoldRecord) {
	if len(r.Attempts) == 0 {
		return
	}
	last := r.Attempts[len(r.Attempts)-1]
	r.Node = last.Node
	r.HeldAt, r.StartedAt, r.StoppedAt = last.HeldAt, last.StartedAt, last.StoppedAt
	r.OutputReturnedAt, r.ReleasedAt = last.OutputReturnedAt, last.ReleasedAt
	r.Usage, r.ExitCode, r.Logs = last.Usage, last.ExitCode, last.Logs
	if r.State != hold.StateCancelled && r.State != hold.StateRejected {
		r.Outcome, r.Reason = last.Outcome, last.Reason
	}
	r.HeldSeconds, r.CPUCoreSeconds, r.MemoryGiBSeconds, r.GPUSeconds = 0, 0, 0, 0
	for _, a := range r.Attempts {
		r.HeldSeconds += a.HeldSeconds
		r.CPUCoreSeconds += a.CPUCoreSeconds
		r.MemoryGiBSeconds += a.MemoryGiBSeconds
		r.GPUSeconds += a.GPUSeconds
	}
}

func requestOf(s events.JobSpec) hold.Request {
	return hold.Request{CPU: s.Request.CPU, MemoryBytes: s.Request.MemoryBytes, GPU: s.Request.GPU,
		DiskBytes: s.Request.DiskBytes, LimitSeconds: s.Request.LimitSeconds}
}

// List returns records matching q in the order their jobs first appeared,
// and whether more follow.
func (p *Projection) List(q wire.ListRequest) ([]*hold.HoldRecord, bool) {
	limit := q.Limit
	// A page must fit in one NATS message (1 MiB): records run to a few KiB.
	if limit <= 0 || limit > 200 {
		limit = 200
	}
	start := 0
	if i, ok := p.pos[q.After]; ok && q.After != "" {
		start = i + 1
	}
	var out []*hold.HoldRecord
	for i := start; i < len(p.order); i++ {
		r := p.records[p.order[i]]
		if !p.matches(r, q) {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, r)
	}
	return out, false
}

// Pending counts the records matching q (every page) that are not over.
func (p *Projection) Pending(q wire.ListRequest) int {
	n := 0
	for _, job := range p.order {
		if r := p.records[job]; p.matches(r, q) && !r.Over() {
			n++
		}
	}
	return n
}

func (p *Projection) matches(r *hold.HoldRecord, q wire.ListRequest) bool {
	if q.Submitter != "" && p.Owner(r.Job) != q.Submitter {
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

func firstTime(r *hold.HoldRecord) *time.Time {
	if r.SubmittedAt != nil {
		return r.SubmittedAt
	}
	return r.HeldAt
}
