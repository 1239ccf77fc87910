package ledger

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
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
//
// Made with NewProjection it keeps every job in memory. Over the ledger's
// bucket (store.go) it keeps in memory only the jobs still open and those
// changed since the last Flush: a flush writes the changed ones to the
// store, with a checkpoint of everything else the projection derived,
// and forgets those that are over. Lookups of the others go to the store.
type Projection struct {
	// jobs are the jobs in memory: every job without a store; with one,
	// the open ones and every job changed since the last flush.
	jobs map[string]*entry
	// fresh are the jobs whose record was made since the last flush, in
	// the order they were made (without a store: every job), and pos each
	// one's place in it, for paging.
	fresh []string
	pos   map[string]int
	// dirty are the jobs changed since the last flush.
	dirty map[string]*entry
	// shards marks the shards of the open-jobs list whose membership
	// changed since the last flush.
	shards map[int]bool
	store  *store

	applied uint64
	// flushed is applied as of the checkpoint the instance builds on (its
	// last flush, or the one it started from): every entry of the store
	// that is not in memory must be as of it or older (see job).
	flushed uint64
	// prefetched are jobs read from the store for the batch being applied
	// (nil: not in the store), so that they are looked up together.
	prefetched map[string]*entry
	records    int // jobs with a record
	// closed is the running sum, per submitter, of the meter of every job
	// that is not open (Totals without a period); the open ones are added
	// when asked.
	closed map[string]*wire.Totals

	chain   hashChain
	read    uint64 // messages hashed into the chain
	skipped uint64 // messages that are not events this version knows
	gaps    uint64 // times a message's sequence did not follow the last one
	// madeAgain are the jobs whose stored entry was found past the
	// checkpoint beside it, and made again from the log (see job), for
	// the service to report.
	madeAgain []string
	// heldAlready are the events the fold was given again for a record
	// that already lists them, and skipped (see fold), for the service to
	// report.
	heldAlready []heldEvent
	// setAside are the node's events about an attempt another node held,
	// listed and set aside (events.FromHolder), for the service to report.
	setAside []setAsideEvent
}

// setAsideEvent is a node's event the fold set aside.
type setAsideEvent struct {
	job, typ, heldOn string
	seq              uint64
}

// entry is what the projection keeps of one job: its record and what
// folding more events into it needs: what the ledger's bucket stores of it.
type entry struct {
	Job string `json:"job"`
	// Owner is the submitter of the job: the identity that ends the
	// subject of the job's first message, if that is a request ("" else).
	// The server binds that token to who published it, so it says whose
	// the job is even when the request's body cannot be read, and nothing
	// logged later changes it.
	Owner string `json:"owner,omitempty"`
	// Made is the sequence at which the job's record was made: its place
	// in listings (0: no record yet).
	Made   uint64           `json:"made,omitempty"`
	Record *hold.HoldRecord `json:"record,omitempty"`
	// IDs is the ce-id of every event listed in the record.
	IDs []string `json:"ids,omitempty"`
	// Digest is the state of the running SHA-256 over the listed events'
	// digests, as stored (digest, in memory).
	Digest []byte    `json:"digest,omitempty"`
	digest hash.Hash `json:"-"`
	// raw is the record's JSON as stored, where a listing of every record
	// read the entry (decodeListed): Record is then nil, and nothing
	// but that listing sees the entry.
	raw []byte
}

// listed reports whether the entry has a record to list: decoded, or as
// stored.
func (e *entry) listed() bool { return e != nil && (e.Record != nil || len(e.raw) > 0) }

// open reports whether the job is still going: it has a record that is
// not over. Only open jobs stay in memory over a store.
func (e *entry) open() bool { return e.Record != nil && !e.Record.Over() }

// NewProjection returns an empty projection that keeps everything in memory.
func NewProjection() *Projection {
	return &Projection{jobs: map[string]*entry{}, pos: map[string]int{}, dirty: map[string]*entry{},
		shards: map[int]bool{}, closed: map[string]*wire.Totals{}}
}

// Applied is the last sequence applied.
func (p *Projection) Applied() uint64 { return p.applied }

// lookup finds a job: in memory, else in the store; nil if the log has no
// message of it.
func (p *Projection) lookup(job string) (*entry, error) {
	if e, ok := p.inMemory(job); ok || p.store == nil {
		return e, nil
	}
	return p.store.load(job)
}

// inMemory is job's entry if this instance holds it (changed since the
// last flush, or read for the batch being applied), and whether it does.
func (p *Projection) inMemory(job string) (*entry, bool) {
	if e := p.jobs[job]; e != nil {
		return e, true
	}
	e, ok := p.prefetched[job]
	return e, ok
}

// Record returns the record of a job, or nil (also when the store could
// not be read: see Lookup).
func (p *Projection) Record(job string) *hold.HoldRecord {
	rec, _, _, _ := p.Lookup(job)
	return rec
}

// Lookup returns the record of a job (nil if it has none), whose job it is
// (see Owner) and whether the log has any message of it.
func (p *Projection) Lookup(job string) (rec *hold.HoldRecord, owner string, known bool, err error) {
	e, err := p.lookup(job)
	if err != nil || e == nil {
		return nil, "", false, err
	}
	return e.Record, e.owner(), true, nil
}

// owner is the submitter whose job this is, "" if the log says of no one:
// see entry.Owner. A job whose first message is no request (written by
// the operator) belongs to the submitter its record names.
func (e *entry) owner() string {
	if e.Owner != "" || e.Record == nil {
		return e.Owner
	}
	return e.Record.Submitter
}

// Owner is the submitter whose job this is, "" if the log says of no one.
func (p *Projection) Owner(job string) string {
	_, owner, _, _ := p.Lookup(job)
	return owner
}

// Known reports whether the log has any message of job.
func (p *Projection) Known(job string) bool {
	_, _, known, _ := p.Lookup(job)
	return known
}

// job returns the entry of the job a message's subject names, making it if
// this is the job's first message: then the subject also says whose the
// job is. It returns nil for a message about no job.
//
// An entry read from the store that holds an event past the checkpoint
// the instance builds on was not written with that checkpoint: folding
// the rest of the log into it would fold that event in again, listed
// twice, and the record's events_digest would disagree with the log (as
// a cluster test once found, in 32 records, after a NATS server was
// killed). The flushes' conditional checkpoint should make that
// impossible; the fold does not rest on it: such an entry is made again
// from the job's messages up to the checkpoint, and written at the next
// flush.
func (p *Projection) job(subject string) (*entry, error) {
	s, err := events.ParseSubject(subject)
	if err != nil || s.Space != events.SpaceJob {
		return nil, nil
	}
	if e := p.jobs[s.Job]; e != nil {
		return e, nil // this instance's own, folded as far as it is
	}
	e, err := p.lookup(s.Job)
	if err == nil {
		var remade bool
		if e, remade, err = p.asOfCheckpoint(s.Job, e); remade {
			p.madeAgain = append(p.madeAgain, s.Job)
		}
	}
	if err != nil || e != nil {
		return e, err
	}
	owner := ""
	if s.IsRequest() {
		owner = strings.Clone(s.Identity)
	}
	e = &entry{Job: strings.Clone(s.Job), Owner: owner}
	p.touch(e)
	return e, nil
}

// heldEvent is an event the fold was given for a record that already held
// it: see fold.
type heldEvent struct {
	job       string
	seq, last uint64
}

// last is the sequence of the last event folded into e (0: none).
func (e *entry) last() uint64 {
	if e == nil || e.Record == nil || len(e.Record.Events) == 0 {
		return 0
	}
	return e.Record.Events[len(e.Record.Events)-1].Seq
}

// asOfCheckpoint is e, job's entry as read from the store, if it is as of
// the checkpoint the instance builds on or older. One that holds an event
// past it (see job) is made again from the job's messages in the log up
// to the checkpoint, and marked changed; nil if the job has no message up
// to there. remade says it was; the caller reports it (madeAgain) once
// the entry is this instance's, so that a job is reported once.
func (p *Projection) asOfCheckpoint(job string, e *entry) (_ *entry, remade bool, _ error) {
	if p.store == nil || e.last() <= p.flushed {
		return e, false, nil
	}
	ctx, cancel := p.store.call()
	defer cancel()
	scratch := NewProjection()
	for m, err := range bus.StoredJob(ctx, p.store.js, job, 1) {
		if err != nil {
			return nil, false, fmt.Errorf("ledger: make the entry of %s again from the log: %w", job, err)
		}
		if m.Sequence > p.flushed {
			break
		}
		if err := scratch.ApplyStored(storedOf(m)); err != nil {
			return nil, false, err
		}
	}
	e = scratch.jobs[job]
	if e != nil {
		p.touch(e)
	}
	return e, true, nil
}

// touch marks e changed: it stays in memory until the next flush writes it.
func (p *Projection) touch(e *entry) {
	if _, ok := p.jobs[e.Job]; !ok {
		p.jobs[e.Job] = e
	}
	if p.store != nil {
		p.dirty[e.Job] = e
	}
}

// Len is the number of records.
func (p *Projection) Len() int { return p.records }

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

// storedOf is m, as the stream holds it, for the projection.
func storedOf(m *jetstream.RawStreamMsg) Stored {
	return Stored{Seq: m.Sequence, Subject: m.Subject, Header: m.Header, Data: m.Data}
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
func (p *Projection) ApplyStored(m Stored) error { return p.ApplyPrepared(Prepare(m)) }

// ApplyPrepared moves the chain past a prepared message and folds its event
// in. A message that does not decode is in the chain but in no record:
// nobody can say what it means, but nobody may remove it unseen either.
// The error is the store's, when a job could not be read from it: the
// message is then not applied.
func (p *Projection) ApplyPrepared(x Prepared) error {
	if x.seq <= p.applied {
		return nil
	}
	var e *entry
	var err error
	if x.err != nil || !inNoRecord(x.env) {
		e, err = p.job(x.subject)
	}
	if err != nil {
		return fmt.Errorf("ledger: apply #%d: %w", x.seq, err)
	}
	if p.applied > 0 && x.seq != p.applied+1 {
		p.gaps++
	}
	p.chain.add(x.seq, x.digest)
	p.read++
	p.applied = x.seq
	if x.err != nil {
		p.skipped++
		return nil
	}
	p.fold(e, x.env, &x.digest)
	return nil
}

// Apply folds one decoded event in. It does not move the chain: use it for
// events whose stored bytes are not at hand, never mixed with ApplyStored.
func (p *Projection) Apply(env events.Envelope) error {
	if env.Seq != 0 && env.Seq <= p.applied {
		return nil
	}
	subject := env.NATSSubject
	if subject == "" {
		subject, _ = events.SubjectOf(env.Subject, env.Event)
	}
	var e *entry
	var err error
	if !inNoRecord(env) {
		e, err = p.job(subject)
	}
	if err != nil {
		return fmt.Errorf("ledger: apply #%d: %w", env.Seq, err)
	}
	if env.Seq > p.applied {
		p.applied = env.Seq
	}
	p.fold(e, env, nil)
	return nil
}

// fold adds one event to its job's record.
//
// The rules, which the audit derives again from the written definition:
// node events and a sweep's cancel are in no record; an event the job's
// log already holds (the same ce-id, stored again after the duplicate
// window) is listed but changes nothing, except a repeated JobRequested, a
// client's request under a used id, which SUBMIT refuses and which is no
// part of the job.
func (p *Projection) fold(e *entry, env events.Envelope, digest *[32]byte) {
	if e == nil || events.IsNodeEvent(env.Event) {
		return
	}
	if env.Seq != 0 && env.Seq <= e.last() {
		// The log is folded in order, so a record whose last event is
		// at or past this one holds it already: folded in again, it
		// would be listed twice and the record's events_digest would
		// disagree with the log. job makes that impossible for the ways
		// the ledger knows of; this holds whatever the way.
		p.heldAlready = append(p.heldAlready, heldEvent{job: e.Job, seq: env.Seq, last: e.last()})
		return
	}
	before := p.closedShare(e)
	wasOpen := e.open()
	defer func() {
		p.moveClosed(before, p.closedShare(e))
		if e.open() != wasOpen {
			p.shards[shardOf(e.Job)] = true
		}
	}()
	p.touch(e)
	r := e.Record
	if r == nil {
		// Strings decoded from headers share the message's header block:
		// what the projection keeps is copied, so that it keeps no message.
		r = &hold.HoldRecord{Job: e.Job, State: hold.StateSubmitted, Output: hold.Output{Missing: []string{}}, Events: []hold.EventRef{}}
		e.Record, e.Made = r, env.Seq
		p.records++
		p.pos[e.Job] = len(p.fresh)
		p.fresh = append(p.fresh, e.Job)
	}
	// A node may publish a start or a stop of any job under its own name,
	// with the ids the holder's will have: listed, it counts for nothing,
	// and its id is not the job's, lest the holder's be taken for a repeat.
	foreign := !events.FromHolder(env.Event, heldOn(r, env.Attempt()))
	// A checkpoint save counts only while its attempt runs: one a node
	// sent after the attempt ended (a node cut off, its attempt given up)
	// is listed and set aside like another node's.
	if c, ok := env.Event.(*events.CheckpointSaved); ok && !foreign && !saveCounts(r, c) {
		foreign = true
	}
	repeated := false
	for _, id := range e.IDs {
		repeated = repeated || id == env.ID
	}
	if repeated && env.Type == events.TypeJobRequested {
		return
	}
	if !foreign {
		e.IDs = append(e.IDs, strings.Clone(env.ID))
	}
	ref := hold.EventRef{Seq: env.Seq, Type: events.Name(env.Type), SetAside: foreign}
	if digest != nil {
		if e.digest == nil {
			e.digest = sha256.New()
		}
		e.digest.Write(digest[:])
		ref.Digest = sha256Text(digest[:])
		r.EventsDigest = sha256Text(e.digest.Sum(nil))
	}
	r.Events = append(r.Events, ref)
	if foreign {
		p.setAside = append(p.setAside, setAsideEvent{job: e.Job, seq: env.Seq, typ: env.Type, heldOn: heldOn(r, env.Attempt())})
		return
	}
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
		a.Held = hold.Resources{CPU: e.CPU, MemoryBytes: e.MemoryBytes, GPU: e.GPU, DiskBytes: e.DiskBytes, GPUs: e.GPUs}
		r.State = hold.StateHeld
	case *events.RunStarted:
		a := p.attempt(r, e.Attempt)
		a.StartedAt, a.ResumedFrom = &at, e.ResumedFrom
		r.Isolation = e.Isolation // the last start's: see hold.HoldRecord
		r.State = hold.StateRunning
	case *events.RunStopped:
		a := p.attempt(r, e.Attempt)
		if a.ExpiredAt != nil {
			// RENT ended the attempt before the node reported: the stop is
			// listed and set aside, and the record keeps RENT's end.
			break
		}
		a.StoppedAt, a.Outcome, a.ExitCode, a.Reason, a.Usage, a.Logs = &at, e.Outcome, e.ExitCode, e.Reason, e.Usage, e.Logs
		a.Signature, a.SigningKey = e.Signature, e.SigningKey
		r.State = hold.StateStopped
	case *events.CheckpointSaved:
		a := p.attempt(r, e.Attempt)
		if a.Checkpoints == nil {
			a.Checkpoints = &hold.Checkpoints{}
		}
		c := a.Checkpoints
		c.Saves++
		c.Bytes, c.NewBytes = e.Bytes, c.NewBytes+e.NewBytes
		c.Last, c.LastAt, c.Manifest = e.SaveName(), at, e.Manifest
	case *events.HoldExpired:
		a := p.attempt(r, e.Attempt)
		a.Outcome, a.Reason, a.ExpiredAt = events.LimitExceeded, e.Reason, &at
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
			a.Flags = append(a.Flags, usageFlags(a, r.Isolation)...)
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
	if len(a.Held.GPUs) > 0 {
		a.GPUSecondsByDevice = make(map[string]float64, len(a.Held.GPUs))
		for _, u := range a.Held.GPUs {
			a.GPUSecondsByDevice[u] = held
		}
	}
}

// inNoRecord reports whether env is on a job's subjects but in no job's
// record: a sweep's cancel (events.SweepCancel), about every member of the
// sweep and so about no one job. The audit reads the same rule from the
// written definition (pkg/events) and checks each cancel that followed it.
func inNoRecord(env events.Envelope) bool {
	_, sweep := events.SweepCancel(env.Event)
	return sweep
}

// saveCounts reports whether a save of the record's job counts: its
// attempt started and nothing ended it yet (its stop, HoldLost,
// HoldExpired, ComputeReleased). events.Saves says the same of a history.
func saveCounts(r *hold.HoldRecord, c *events.CheckpointSaved) bool {
	for i := range r.Attempts {
		if a := &r.Attempts[i]; a.Attempt == c.Attempt {
			return a.StartedAt != nil && a.StoppedAt == nil && a.ExpiredAt == nil && a.ReleasedAt == nil && a.Outcome != events.NodeLost
		}
	}
	return false
}

// heldOn is the node attempt n of the record was held on, "" if none.
func heldOn(r *hold.HoldRecord, n int) string {
	for i := range r.Attempts {
		if r.Attempts[i].Attempt == n {
			return r.Attempts[i].Node
		}
	}
	return ""
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
	r.HeldSeconds, r.CPUCoreSeconds, r.MemoryGiBSeconds, r.GPUSeconds, r.LostSeconds = 0, 0, 0, 0, 0
	r.Flags = nil
	for _, a := range r.Attempts {
		for _, f := range a.Flags {
			r.Flags = append(r.Flags, fmt.Sprintf("attempt %d: %s", a.Attempt, f))
		}
		r.HeldSeconds += a.HeldSeconds
		if a.Outcome == events.NodeLost {
			r.LostSeconds += a.HeldSeconds
		}
		r.CPUCoreSeconds += a.CPUCoreSeconds
		r.MemoryGiBSeconds += a.MemoryGiBSeconds
		r.GPUSeconds += a.GPUSeconds
	}
}

func requestOf(s events.JobSpec) hold.Request {
	return hold.Request{CPU: s.Request.CPU, MemoryBytes: s.Request.MemoryBytes, GPU: s.Request.GPU,
		DiskBytes: s.Request.DiskBytes, LimitSeconds: s.Request.LimitSeconds}
}

// List returns records matching q in the order their records were made
// (the order their jobs first appeared in the log), and whether more
// follow.
func (p *Projection) List(q wire.ListRequest) ([]*hold.HoldRecord, bool, error) {
	limit := pageLimit(q)
	out := []*hold.HoldRecord{}
	more := false
	err := p.each(q.Submitter, q.After, limit+1, false, func(e *entry) bool {
		if !p.matches(e, q) {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, e.Record)
		return true
	})
	if len(out) == 0 {
		out = nil
	}
	return out, more, err
}

// whole reports whether q lists every record: no filter but paging. Such
// a listing (e31 audit's, an operator's export) is served with ListJSON.
func whole(q wire.ListRequest) bool {
	return q.Submitter == "" && q.Node == "" && q.Sweep == "" && q.Since.IsZero() && q.Until.IsZero()
}

// ListJSON is List for a listing of every record (whole): each record's
// JSON, as stored where it was read from the store, not decoded and
// encoded again, which a listing of a long history spent most of its
// time on.
func (p *Projection) ListJSON(q wire.ListRequest) ([][]byte, bool, error) {
	if !whole(q) {
		return nil, false, errors.New("ledger: ListJSON lists every record: no filter but paging")
	}
	limit := pageLimit(q)
	var out [][]byte
	more := false
	var encErr error
	err := p.each("", q.After, limit+1, true, func(e *entry) bool {
		if len(out) == limit {
			more = true
			return false
		}
		b := e.raw
		if b == nil { // in memory: changed since the last flush
			if b, encErr = gojson.Marshal(e.Record); encErr != nil {
				encErr = fmt.Errorf("encode the record of %s: %w", e.Job, encErr)
				return false
			}
		}
		out = append(out, b)
		return true
	})
	if err == nil {
		err = encErr
	}
	return out, more, err
}

// pageLimit is how many records a page of q holds.
func pageLimit(q wire.ListRequest) int {
	// A page must fit in one NATS message (1 MiB): records run to a few KiB.
	if q.Limit <= 0 || q.Limit > 200 {
		return 200
	}
	return q.Limit
}

// each calls fn with every job that has a record, in the order the records
// were made, from the one after job after (from the first if after is no
// such job), until fn returns false. With owner, it may leave out jobs
// that are not owner's (it still calls fn with some that are not). The
// stored jobs come first: every one of them was made before the last
// flush, and every fresh one after it. They are read chunk at a time
// (what fn is likely to take: a page, and one more to tell whether more
// follow), with one request for the entries of a chunk that are not in
// memory, where one a job made a listing of every record a request a
// record.
func (p *Projection) each(owner, after string, chunk int, raw bool, fn func(e *entry) bool) error {
	start := 0
	if i, ok := p.pos[after]; ok && after != "" {
		start = i + 1
	} else if p.store != nil {
		stopped := false
		afterKey := ""
		if after != "" {
			if e, err := p.lookup(after); err != nil {
				return err
			} else if e != nil && e.Record != nil {
				afterKey = madeKey(e)
			}
		}
		err := p.store.each(owner, afterKey, chunk, func(jobs []string) (bool, error) {
			found, err := p.lookupMany(jobs, raw)
			if err != nil {
				return false, err
			}
			for _, job := range jobs {
				if _, fresh := p.pos[job]; fresh {
					// Made again since the last flush, over an index key
					// a flush beside the checkpoint wrote (see job): it
					// comes with the fresh ones, in its new place.
					continue
				}
				if e := found[job]; e.listed() && !fn(e) {
					stopped = true
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil || stopped {
			return err
		}
	}
	for i := start; i < len(p.fresh); i++ {
		if e := p.jobs[p.fresh[i]]; e != nil && e.Record != nil && !fn(e) {
			return nil
		}
	}
	return nil
}

// lookupMany is lookup of each of jobs, those not in memory read from the
// store together (store.loadMany); with raw, their records are left as
// stored (decodeListed).
func (p *Projection) lookupMany(jobs []string, raw bool) (map[string]*entry, error) {
	found := make(map[string]*entry, len(jobs))
	var missing []string
	for _, job := range jobs {
		if e, ok := p.inMemory(job); ok {
			found[job] = e
		} else {
			missing = append(missing, job)
		}
	}
	if len(missing) == 0 || p.store == nil {
		return found, nil
	}
	decode := decodeEntry
	if raw {
		decode = decodeListed
	}
	read, err := p.store.loadMany(missing, false, decode)
	if err != nil {
		return nil, err
	}
	for job, e := range read {
		found[job] = e
	}
	return found, nil
}

// Pending counts the records matching q (every page) that are not over:
// only open jobs, which are all in memory.
func (p *Projection) Pending(q wire.ListRequest) int {
	n := 0
	for _, e := range p.jobs {
		if e.open() && p.matches(e, q) {
			n++
		}
	}
	return n
}

func (p *Projection) matches(e *entry, q wire.ListRequest) bool {
	r := e.Record
	if r == nil {
		return false
	}
	if q.Submitter != "" && e.owner() != q.Submitter {
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

// missing lists the jobs of xs that are neither in memory nor known to be
// absent: those to read from the store before the batch is applied.
func (p *Projection) missing(xs []Prepared) []string {
	if p.store == nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, x := range xs {
		s, err := events.ParseSubject(x.subject)
		if err != nil || s.Space != events.SpaceJob || seen[s.Job] {
			continue
		}
		seen[s.Job] = true
		if _, ok := p.jobs[s.Job]; !ok {
			out = append(out, strings.Clone(s.Job))
		}
	}
	return out
}
