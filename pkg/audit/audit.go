package audit

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// Raw is one stored message, as read from the server or from an export.
type Raw struct {
	Seq     uint64
	Subject string
	Headers nats.Header
	Body    []byte
	// Stored is when the stream stored it, by the server's clock: the
	// log's own time, which no publisher sets. Zero where unknown (an
	// export written before it carried it).
	Stored time.Time
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
	Undecodable  = "undecodable"  // a message that is not a valid event
	Gap          = "gap"          // stream sequences missing from the log
	Duplicate    = "duplicate"    // a message, or a service's event, stored twice
	Order        = "order"        // an event where the life of a job does not allow it
	Inconsistent = "inconsistent" // an event that contradicts itself or its hold
	Unreleased   = "unreleased"   // compute still held for a job that is over
	Clock        = "clock"        // compute released before it was held
	Overlap      = "overlap"      // an attempt held before the job's previous attempt ended, by the log's times
	Capacity     = "capacity"     // a node held beyond what it has (or its card), while expired, or unisolated without leave
	Device       = "device"       // a GPU held by two attempts at once, or one its node did not announce
	Chain        = "chain"        // the log does not pass through a chain head
	Mismatch     = "mismatch"     // the ledger's record differs from the log's
	MissingRec   = "missing_record"
	ExtraRec     = "extra_record"
)

// Kinds of finding about what a node reported.
const (
	// Signature: a stop not signed by the node its attempt was held on
	// (changed since, another key, or unsigned from a node with a card),
	// or a card the operator did not sign for the node presenting it.
	Signature = "signature"
	// UsageBeyondHold: usage a node reports that its hold could not
	// contain (hold.FlagUsage).
	UsageBeyondHold = "usage_beyond_hold"
)

// Report is what an audit found.
type Report struct {
	Events  int    `json:"events"`
	Jobs    int    `json:"jobs"`
	LastSeq uint64 `json:"last_seq"`
	// Head is the chain over every message read: give it to a later audit
	// as --since-head.
	Head chain.Head `json:"head"`
	// Checked lists the heads the chain was checked against.
	Checked []chain.Head `json:"checked,omitempty"`
	// Skipped counts events of types this version does not know, by type:
	// they are in the chain, but nothing else can be said of them.
	Skipped map[string]int `json:"skipped,omitempty"`
	// SetAside counts what clients published that is no part of any job's
	// life: messages on a request, cancel or delete subject that are not
	// valid events there (any tenant may publish on its own tail of any
	// job's subjects), and requests after a job's first. They are in the
	// chain and in no record's derivation; the services set them aside too.
	SetAside int       `json:"set_aside,omitempty"`
	Findings []Finding `json:"findings"`
	// Compared counts the ledger's records compared with the rebuilt ones.
	Compared int `json:"compared,omitempty"`
	// Moving counts jobs not compared this time: the ledger's record
	// already includes events logged after the audit read the log, or
	// the job began after the ledger's checkpoint, which is behind where
	// the audit read (Auditor.Run).
	Moving int `json:"moving,omitempty"`
	// CardsKey is the operator's card key node cards were checked
	// against; absent when the auditor was given none, and cards were
	// taken as they came.
	CardsKey string `json:"cards_key,omitempty"`
	// StopsVerified counts the stops whose signature verified with the
	// key of their node's card; StopsUnchecked those of nodes without a
	// card, which nothing binds to a node.
	StopsVerified  int                         `json:"stops_verified,omitempty"`
	StopsUnchecked int                         `json:"stops_unchecked,omitempty"`
	Records        map[string]*hold.HoldRecord `json:"-"`
}

// OK reports whether nothing was found.
func (r *Report) OK() bool { return len(r.Findings) == 0 }

// Options configures an Auditor.
type Options struct {
	// Heads are chain heads the log must pass through: from an earlier
	// `e31 ledger --head`, kept by the auditor.
	Heads []chain.Head
	// LedgerHead is the ledger's head now: its chain must be the audit's.
	LedgerHead chain.Head
	// Workers decode messages in parallel when reading; default GOMAXPROCS.
	Workers int
	// Forget keeps no record of a job once the job is over and its record
	// checked, only sums of it: about 200 bytes for each job that ended
	// (to judge what the log says of it afterwards, and to compare), until
	// Auditor.Run has compared it with the ledger's and lets go of it.
	// Report.Records then holds only the jobs still open at the end:
	// compare with Auditor.Run, not Report.Compare.
	Forget bool
	// Progress, if set, is told how far the reading has come, in messages
	// (ReadStream, ReadExport): an audit of a long history takes minutes.
	Progress Progress
	// CardsKey is the operator's card key (cards.pub of `e31 creds
	// init`): node cards are checked against it (signature.go). Nil: the
	// key each card names is taken as the node's, unchecked.
	CardsKey ed25519.PublicKey
}

// Progress is told how far a long piece of work has come: Start opens a
// phase of total steps (0 if not known) named by label, Add counts steps
// done, Done closes it. Its methods are called from one goroutine at a
// time. `e31 audit` shows it as a bar on a terminal.
type Progress interface {
	Start(total int64, label string)
	Add(n int64)
	Done()
}

// Auditor follows the log one message at a time, in log order. It holds
// the history of each job until the job is over, then derives and checks
// the job's record, keeps it (or not: Options.Forget) and lets go of the
// history: what it holds is bounded by the jobs still open. Finish checks
// what was never read and derives the jobs still open. It is not safe for
// concurrent use; Read* decode in parallel and feed it in order.
type Auditor struct {
	// unreadable holds, for each job whose first request could not be
	// read, where that request is.
	unreadable map[string]uint64
	opts       Options
	rep        Report
	chain      HashChain
	heads      map[uint64][]headCheck // heads to check, by sequence
	seqs       seqs                   // sequences read, and those not yet

	open  map[string]*job // jobs not yet over, with their history
	ended map[string]tomb // jobs over: how each ended
	// after holds, by job, where each event of the job stored after its
	// end was first stored, by id, and the ids of requests other than the
	// job's own: what a repeat after the end is told by. It holds only
	// what came after the end (retention's deletions, a cancel asked
	// again) and a tenant's odd requests, of the jobs not yet let go of.
	after     map[string][]stored
	jobs      int // jobs seen
	maxOpen   int // the most jobs open at once
	readAgain int // jobs read again from the log to compare (Run)
	// readCheckpoint, if set, is told each ledger's checkpoint Run reads
	// (a test's hook).
	readCheckpoint func(applied uint64)
	// openSeen holds the jobs open at the end whose ledger's record Run
	// has seen.
	openSeen map[string]bool
	// inStep is set while Run reads the ledger's bucket in step with the
	// log (see merge.go); parked holds the entries read that could not
	// be settled yet, by job.
	inStep *inStep
	parked map[string]*entry
	// letGo counts the jobs compared with the ledger's record and let go
	// of in step; revived, those read again from the log since, because
	// the log said more of them. maxHeld is the most tombs and parked
	// entries held at once in step.
	letGo, revived, maxHeld int
	// settled, if set, is told of each job compareRest settles.
	settled func()
	// spare holds the room of histories let go of, for jobs to come.
	spare [][]fact
	nodes map[string]*node
	holds map[holdKey]*holdUse // attempts held and not yet released
	// devices are the GPUs held now, by UUID (see devices.go).
	devices map[string]deviceHolder
	// sweepCancels are the cancels of whole sweeps read so far.
	sweepCancels sweepCancels
}

// tomb is what the audit keeps of a job that is over: enough to judge
// what the log says of the job afterwards.
type tomb struct {
	seq uint64 // the sequence of the event that ended it
	typ string // its type
	// requested says the job's first request came under its own id
	// (events.ID), which a later request repeats.
	requested bool
	// last is the sequence of the last event the record lists: the
	// ledger's record of the job, when it lists the same last event, is
	// as of the same point of the job's life.
	last uint64
	// sums stand for the record let go of (Options.Forget), for Run.
	sums sums
}

// stored is where an event, by its id, was first stored.
type stored struct {
	id  string
	seq uint64
}

// job is one job's history as read.
type job struct {
	facts []fact
}

// fact is one event of a job, reduced to what the record and the checks
// need.
type fact struct {
	seq    uint64
	typ    string
	id     string
	at     time.Time
	stored time.Time // the stream's time (Raw.Stored), or at where unknown
	digest [32]byte
	ev     events.Event // slimmed: see slim
	repeat bool         // the job's log already held this ce-id
	// foreign marks a node's word (a start, a stop) about an attempt the
	// node did not hold: listed, set aside, no part of the job.
	foreign bool
}

// decoded is one message digested, decoded and checked on its own, ready
// to be ingested in log order.
type decoded struct {
	raw    Raw
	digest [32]byte
	env    events.Envelope
	err    error
	id     string   // the ce-id, apart from the header block that holds it
	wrong  []string // what the message gets wrong on its own
	stop   stopCheck
}

// New returns an empty Auditor.
func New(opts Options) *Auditor {
	a := &Auditor{opts: opts, heads: map[uint64][]headCheck{}, open: map[string]*job{}, ended: map[string]tomb{},
		nodes: map[string]*node{}, holds: map[holdKey]*holdUse{}, devices: map[string]deviceHolder{}}
	if opts.CardsKey != nil {
		a.rep.CardsKey = keyPrefix + base64.StdEncoding.EncodeToString(opts.CardsKey)
	}
	if !opts.Forget {
		a.rep.Records = map[string]*hold.HoldRecord{}
	}
	for _, h := range opts.Heads {
		a.heads[h.Seq] = append(a.heads[h.Seq], headCheck{h, false})
	}
	if h := opts.LedgerHead; h.Seq > 0 {
		a.heads[h.Seq] = append(a.heads[h.Seq], headCheck{h, true})
	}
	return a
}

// Add reads one message. Messages must come in log order.
func (a *Auditor) Add(m Raw) {
	var d decoded
	decodeInto(&d, m)
	a.ingest(&d)
}

// decodeInto digests and decodes one message; it is safe to call
// concurrently.
func decodeInto(d *decoded, m Raw) {
	d.raw, d.digest = m, Digest(m)
	d.env, d.err = events.Decode(m.Subject, m.Headers, m.Body)
	if d.err != nil {
		return
	}
	env := &d.env
	env.Seq = m.Seq
	if s, ok := env.Event.(*events.RunStopped); ok {
		// Before slim, which drops the output the signature covers.
		d.stop = checkStopOf(env.Subject, s)
	}
	env.Event = slim(env.Event)
	d.id = strings.Clone(env.ID)
	if want := events.ID(env.Subject, env.Event); env.ID != want {
		d.wrong = append(d.wrong, fmt.Sprintf("ce-id is %q, but a %s about %s has the id %q", env.ID, events.Name(env.Type), env.Subject, want))
	}
	if vs := m.Headers.Values(events.HeaderMsgID); len(vs) > 0 && vs[0] != env.ID {
		d.wrong = append(d.wrong, fmt.Sprintf("Nats-Msg-Id is %q, not the ce-id %q", vs[0], env.ID))
	}
}

// slim drops from an event what no record or check reads (the job's
// declaration beyond its name and request, the files RUN collected), so
// that the audit of a long log fits in memory.
func slim(ev events.Event) events.Event {
	switch e := ev.(type) {
	case *events.JobRequested:
		e.Spec = slimSpec(e.Spec)
	case *events.JobSubmitted:
		e.Spec = slimSpec(e.Spec)
	case *events.ComputeHeld:
		e.Spec = events.JobSpec{}
	case *events.RunStopped:
		e.Output = events.Collected{}
	}
	return ev
}

func slimSpec(s events.JobSpec) events.JobSpec {
	return events.JobSpec{Name: s.Name, Request: s.Request, Sweep: s.Sweep}
}

// ingest takes one decoded message, in log order.
func (a *Auditor) ingest(d *decoded) {
	m := d.raw
	// A subject that is not e31's reads as the zero Subject: no job, no
	// client's kind, no node.
	subj, _ := events.ParseSubject(m.Subject)
	a.rep.Events++
	a.chain.Add(m.Seq, d.digest)
	for _, h := range a.heads[m.Seq] {
		a.checkHead(h)
	}
	delete(a.heads, m.Seq)
	dup, late := a.seqs.add(m.Seq)
	if dup {
		a.find(Finding{Job: subj.Job, Seq: m.Seq, Kind: Duplicate, Detail: fmt.Sprintf("message #%d appears twice in the log", m.Seq)})
		return
	}
	if late {
		a.find(Finding{Job: subj.Job, Seq: m.Seq, Kind: Order, Detail: fmt.Sprintf("message #%d comes after #%d: out of stream order", m.Seq, a.rep.LastSeq)})
	}
	a.rep.LastSeq = a.seqs.last
	if d.err != nil {
		if subj.ClientKind() || subj.NodesWord() {
			// Anyone allowed to submit can publish garbage on its own tail
			// of any job's subjects, and any node on its own subjects of a
			// start or a stop: it is the client's (or the node's) fault,
			// not the log's, and it changes no job. Only a job's first request,
			// readable or not, says what the job is: SUBMIT refuses an
			// unreadable one with a JobRejected that names the problem.
			a.rep.SetAside++
			job := subj.Job
			if _, over := a.ended[job]; subj.IsRequest() && !events.IsUnknownType(d.err) && !over && a.unreadable[job] == 0 && !a.requested(job) {
				if a.unreadable == nil {
					a.unreadable = map[string]uint64{}
				}
				a.unreadable[job] = m.Seq
			}
			return
		}
		if events.IsUnknownType(d.err) {
			if a.rep.Skipped == nil {
				a.rep.Skipped = map[string]int{}
			}
			a.rep.Skipped[m.Headers.Get(events.HeaderType)]++
			return
		}
		a.find(Finding{Job: subj.Job, Seq: m.Seq, Kind: Undecodable, Detail: d.err.Error()})
		return
	}
	env := &d.env
	f := fact{seq: env.Seq, typ: typeNames[env.Type], id: d.id, at: env.Time.UTC(), stored: d.raw.Stored.UTC(), digest: d.digest, ev: env.Event}
	if d.raw.Stored.IsZero() {
		f.stored = f.at
	}
	sender, fromNode := senderOf(subj, f.ev)
	t, over := a.ended[env.Subject]
	// A node's start or stop counts only from the node the attempt was
	// held on; after the job's end, from none.
	f.foreign = fromNode && (over || sender != a.heldOn(env.Subject, env.Attempt()))
	if !subj.ClientKind() && !f.foreign {
		// A client's request may carry any id: it is the client's own
		// publish, checked by no service, and changes nothing but as
		// what it asks; so is a node's word about what it did not hold.
		// The services' events must carry theirs.
		for _, w := range d.wrong {
			a.find(Finding{Job: env.Subject, Seq: env.Seq, Kind: Inconsistent, Detail: w})
		}
	}
	if c, ok := events.SweepCancel(env.Event); ok {
		// About every member of a sweep, so in no one job's record: it is
		// kept to check the cancels that follow it (sweep.go).
		a.sweepCancels.add(env.Subject, c, f.seq)
		return
	}
	// A node's event by the subject it is stored on, as the written
	// definition says, not by events.IsNodeEvent, which the ledger folds
	// by: the audit derives the record's rules apart, and Decode holds the
	// two to one answer.
	if subj.Space == events.SpaceNode {
		a.nodeEvent(f, env.Subject)
		return
	}
	if over {
		a.afterEnd(env.Subject, t, f)
		return
	}
	j := a.open[env.Subject]
	if j == nil && a.letGo > 0 && f.typ != events.TypeJobRequested {
		// Nothing but a request begins a job: this one may be over, and
		// let go of (Run).
		if t, over := a.reviveInStep(env.Subject, f.seq); over {
			a.afterEnd(env.Subject, t, f)
			return
		}
	}
	id := env.Subject
	if j == nil {
		// The id is cloned so that it does not hold the header block it
		// came in.
		j = &job{facts: a.factRoom()}
		id = strings.Clone(env.Subject)
		a.open[id] = j
		a.jobs++
		a.maxOpen = max(a.maxOpen, len(a.open))
	}
	if f.foreign {
		// Listed (it is in the job's log), and set aside: its id is not
		// the job's, lest the holder's, which has the same, be taken for
		// a repeat.
		a.rep.SetAside++
		j.facts = append(j.facts, f)
		return
	}
	for i := range j.facts {
		if j.facts[i].foreign {
			continue
		}
		if j.facts[i].id == f.id {
			f.repeat = true
			if !isRequest(f.typ) {
				a.find(Finding{Job: env.Subject, Seq: f.seq, Kind: Duplicate, Detail: fmt.Sprintf(
					"%s %s was already stored at #%d", events.Name(f.typ), f.id, j.facts[i].seq)})
			}
			break
		}
	}
	j.facts = append(j.facts, f)
	if !f.repeat {
		a.capacity(env.Subject, f)
		a.checkStop(env.Subject, f, d.stop)
		if events.Terminal(f.ev) {
			a.close(id, j)
		}
	}
}

// close derives the record of a job whose last event may have ended it.
// If the job is over, its findings and record are final: the record is
// kept (unless Options.Forget) and its history let go of.
func (a *Auditor) close(id string, j *job) {
	d := derive(id, j.facts, a.unreadable[id], a.rep.Records != nil, a.sweepCancels)
	if d.end == nil {
		return // an ending the job's life did not allow: it goes on
	}
	a.settle(id, d)
	t := tomb{seq: d.end.seq, typ: d.end.typ}
	if a.rep.Records == nil {
		t.sums = sumsOf(d.rec, j.facts)
	}
	for _, f := range j.facts {
		if !f.repeat || f.typ != events.TypeJobRequested {
			t.last = max(t.last, f.seq) // listed
		}
		if f.typ != events.TypeJobRequested {
			continue
		}
		if f.id == events.ID(id, f.ev) && !t.requested {
			t.requested = true
		} else {
			a.remember(id, f.id, f.seq)
		}
	}
	delete(a.open, id)
	delete(a.unreadable, id)
	a.ended[id] = t
	a.tombChanged(id)
	if cap(j.facts) <= 16 && len(a.spare) < 1024 {
		clear(j.facts)
		a.spare = append(a.spare, j.facts[:0])
	}
}

// factRoom is room for a new job's history: a job that ended left it,
// or it is made. Most jobs have eight events or fewer.
func (a *Auditor) factRoom() []fact {
	if n := len(a.spare); n > 0 {
		room := a.spare[n-1]
		a.spare = a.spare[:n-1]
		return room
	}
	return make([]fact, 0, 8)
}

// settle takes a job's derivation into the report.
func (a *Auditor) settle(id string, d derived) {
	a.rep.Findings = append(a.rep.Findings, d.findings...)
	a.rep.SetAside += d.setAside
	if a.rep.Records != nil {
		a.rep.Records[id] = d.rec
	}
}

// remember notes where an event of job with id was first stored, for a
// repeat after the job's end to be told by; it reports where, if it was
// already.
func (a *Auditor) remember(job, id string, seq uint64) (uint64, bool) {
	if a.after == nil {
		a.after = map[string][]stored{}
	}
	ids := a.after[job]
	for _, s := range ids {
		if s.id == id {
			return s.seq, true
		}
	}
	a.after[job] = append(ids, stored{id, seq})
	return 0, false
}

// afterEnd takes an event of a job that is over. Only a client's request
// (a cancel asked again, a deletion asked) and what events.AfterEnd allows
// (retention's deletions) may follow the end. The record, when kept,
// lists the event, as derive would, and shows a deletion.
func (a *Auditor) afterEnd(id string, t tomb, f fact) {
	// Cloned, as a job's id is when it is first read: a map given a key
	// anew keeps the new one, and this one is part of a message.
	id = strings.Clone(id)
	if f.typ == events.TypeJobRequested && t.requested && f.id == events.ID(id, f.ev) {
		f.repeat = true
	}
	if first, ok := a.remember(id, f.id, f.seq); ok {
		f.repeat = true
		if !isRequest(f.typ) {
			a.find(Finding{Job: id, Seq: f.seq, Kind: Duplicate, Detail: fmt.Sprintf(
				"%s %s was already stored at #%d", events.Name(f.typ), f.id, first)})
		}
	}
	rec := a.rep.Records[id]
	if f.foreign {
		// A node's start or stop after the job's end: listed, set aside.
		// The ledger sets aside one from a node the attempt was not held
		// on alike; one from the holder it counts, and the records then
		// differ where the stop changed it.
		a.rep.SetAside++
		t.last = f.seq
		if rec != nil {
			rec.Events = append(rec.Events, hold.EventRef{Seq: f.seq, Type: events.Name(f.typ), Digest: digestText(f.digest[:]), SetAside: true})
			rec.EventsDigest = eventsDigest(rec.Events)
		} else {
			t.sums.events.add(f.seq, events.Name(f.typ), f.digest)
		}
		a.ended[id] = t
		a.tombChanged(id)
		return
	}
	if f.typ == events.TypeJobRequested {
		// Set aside: only the first request says what was asked; a repeat
		// under a used id is not even listed.
		a.rep.SetAside++
		if f.repeat {
			return
		}
	}
	t.last = f.seq
	if rec != nil {
		rec.Events = append(rec.Events, hold.EventRef{Seq: f.seq, Type: events.Name(f.typ), Digest: digestText(f.digest[:])})
		rec.EventsDigest = eventsDigest(rec.Events)
	} else {
		t.sums.events.add(f.seq, events.Name(f.typ), f.digest)
	}
	a.ended[id] = t
	// Listed, and the deletion below taken: the ledger's record may be
	// as of this event.
	defer a.tombChanged(id)
	if f.repeat {
		return
	}
	if !isRequest(f.typ) && !events.AfterEnd(f.ev) {
		a.find(Finding{Job: id, Seq: f.seq, Kind: Order, Detail: fmt.Sprintf("%s after the job ended with %s at #%d",
			events.Name(f.typ), events.Name(t.typ), t.seq)})
	}
	a.capacity(id, f)
	if ev, ok := f.ev.(*events.Deleted); ok {
		at := f.at
		switch {
		case rec != nil && ev.What == events.WhatOutput:
			rec.Output.DeletedAt = &at
		case rec != nil:
			rec.DataDeletedAt = &at
		case ev.What == events.WhatOutput:
			t.sums.outputDeleted = at.UnixNano()
			a.ended[id] = t
		default:
			t.sums.dataDeleted = at.UnixNano()
			a.ended[id] = t
		}
	}
}

// senderOf is the node that published ev, a start, a stop or a
// checkpoint save: the node its
// subject ends with, which the server lets only that node publish on, or,
// on a subject from before nodes were named there, the node its body
// names. ok is false for every other event. (The ledger asks
// events.FromHolder, which reads the body, which Decode holds to the
// subject: two ways to one answer.)
func senderOf(subj events.Subject, ev events.Event) (node string, ok bool) {
	var h events.Hold
	switch e := ev.(type) {
	case *events.RunStarted:
		h = e.Hold
	case *events.RunStopped:
		h = e.Hold
	case *events.CheckpointSaved:
		h = e.Hold
	default:
		return "", false
	}
	if subj.Node != "" {
		return subj.Node, true
	}
	return h.Node, true
}

// heldOn is the node attempt of job, still open, was held on, as its
// ComputeHeld says; "" if it was not held.
func (a *Auditor) heldOn(job string, attempt int) string {
	if j := a.open[job]; j != nil {
		for _, f := range j.facts {
			if h, ok := f.ev.(*events.ComputeHeld); ok && h.Attempt == attempt && !f.repeat {
				return h.Node
			}
		}
	}
	return ""
}

// requested reports whether a readable request of job, still open, has
// been read.
func (a *Auditor) requested(job string) bool {
	if j := a.open[job]; j != nil {
		for _, f := range j.facts {
			if f.typ == events.TypeJobRequested {
				return true
			}
		}
	}
	return false
}

// typeNames maps each event type to itself, held apart from the header
// blocks the types arrive in: a fact keeps its type, not the message.
var typeNames = func() map[string]string {
	m := map[string]string{}
	for _, t := range events.Types() {
		m[t] = t
	}
	return m
}()

// isRequest reports whether a type is a client's request, which may be
// repeated: asking twice is no fault, and changes nothing.
func isRequest(typ string) bool {
	switch typ {
	case events.TypeJobRequested, events.TypeCancelRequested, events.TypeDeleteRequested:
		return true
	}
	return false
}

// headCheck is a head to check, and whether it is the ledger's.
type headCheck struct {
	chain.Head
	ledger bool
}

// checkHead checks the chain, just past h.Seq, against a head.
func (a *Auditor) checkHead(h headCheck) {
	a.rep.Checked = append(a.rep.Checked, h.Head)
	got := a.chain.Head()
	switch {
	case got.Hash == h.Hash:
	case h.ledger:
		a.find(Finding{Seq: h.Seq, Kind: Chain, Detail: fmt.Sprintf(
			"the ledger's chain head is %s, but recomputed from the first message the chain is %s at #%d: the ledger read a different log",
			h.Head, got.Hash, h.Seq)})
	default:
		a.find(Finding{Seq: h.Seq, Kind: Chain, Detail: fmt.Sprintf(
			"the chain does not pass through %s: recomputed from the first message it is %s at #%d, so something at or before #%d was changed, inserted or removed",
			h.Head, got.Hash, h.Seq, h.Seq)})
	}
}

func (a *Auditor) find(f Finding) { a.rep.Findings = append(a.rep.Findings, f) }

// Finish derives every job's record, checks each job's history and what
// was not read, and returns the report.
func (a *Auditor) Finish() *Report {
	for seq, hs := range a.heads {
		for _, h := range hs {
			a.rep.Checked = append(a.rep.Checked, h.Head)
			a.find(Finding{Seq: seq, Kind: Chain, Detail: fmt.Sprintf(
				"the log has no message #%d, so it cannot pass through the head %s: it was removed, or the log was cut short", seq, h.Head)})
		}
	}
	a.heads = nil
	for _, g := range a.seqs.gaps {
		detail := fmt.Sprintf("message #%d is missing from the log", g[0])
		if g[1] > g[0] {
			detail = fmt.Sprintf("messages #%d to #%d are missing from the log", g[0], g[1])
		}
		a.find(Finding{Seq: g[0], Kind: Gap, Detail: detail})
	}
	// The jobs still open: derived as they are, their records kept in any
	// case (there are only so many).
	if a.rep.Records == nil {
		a.rep.Records = make(map[string]*hold.HoldRecord, len(a.open))
	}
	ids := make([]string, 0, len(a.open))
	for id := range a.open {
		ids = append(ids, id)
	}
	// In the order they first appeared, as the ledger lists them.
	sort.Slice(ids, func(i, k int) bool { return a.open[ids[i]].facts[0].seq < a.open[ids[k]].facts[0].seq })
	for _, id := range ids {
		d := derive(id, a.open[id].facts, a.unreadable[id], true, a.sweepCancels)
		a.settle(id, d)
		a.rep.Records[id] = d.rec
	}
	a.open = nil
	a.rep.Jobs = a.jobs
	a.rep.Head = a.chain.Head()
	// Findings about the log come in the order of the log; those about a
	// job as a whole after them.
	sort.SliceStable(a.rep.Findings, func(i, j int) bool {
		si, sj := a.rep.Findings[i].Seq, a.rep.Findings[j].Seq
		return si != 0 && (sj == 0 || si < sj)
	})
	if a.rep.Findings == nil {
		a.rep.Findings = []Finding{}
	}
	return &a.rep
}

// Summary is one line for people.
func (r *Report) Summary() string {
	if r.OK() {
		s := fmt.Sprintf("audit passed: %d events, %d jobs; the log is whole", r.Events, r.Jobs)
		if r.Compared > 0 {
			s += fmt.Sprintf(" and every record rebuilt from it matches the ledger's (%d compared)", r.Compared)
		}
		if len(r.Checked) > 0 {
			s += fmt.Sprintf("; it passes through %d head(s)", len(r.Checked))
		}
		if len(r.Checked) == 0 && r.Compared == 0 {
			s += " (with no head and no records to hold it against, a changed event would go unseen)"
		}
		if r.SetAside > 0 {
			s += fmt.Sprintf("; %d message(s) clients published are no part of any job and were set aside", r.SetAside)
		}
		if r.StopsVerified > 0 {
			s += fmt.Sprintf("; %d stop(s) verified as signed by their nodes", r.StopsVerified)
			if r.CardsKey == "" {
				s += " (their cards not checked against the operator's card key: give it)"
			}
		}
		if r.Moving > 0 {
			s += fmt.Sprintf("; %d job(s) not compared this time: the ledger's record is ahead of where the audit read the log, or the ledger not yet as far", r.Moving)
		}
		return s + "; chain head " + r.Head.String()
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
