package audit

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
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
	Capacity     = "capacity"     // a node held beyond what it has, while expired, or unisolated without leave
	Chain        = "chain"        // the log does not pass through a chain head
	Mismatch     = "mismatch"     // the ledger's record differs from the log's
	MissingRec   = "missing_record"
	ExtraRec     = "extra_record"
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
	// Moving counts jobs whose ledger record already includes events logged
	// after the audit read the log: they are not compared this time.
	Moving  int                         `json:"moving,omitempty"`
	Records map[string]*hold.HoldRecord `json:"-"`
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
}

// Auditor accumulates the log, one message at a time, in log order, then
// derives and checks every record in Finish. It is not safe for concurrent
// use; Read* decode in parallel and feed it in order.
type Auditor struct {
	// unreadable holds, for each job whose first request could not be
	// read, where that request is.
	unreadable map[string]uint64
	opts       Options
	rep        Report
	chain      HashChain
	heads      map[uint64][]headCheck // heads to check, by sequence
	seen       bitset                 // sequences read

	jobs  map[string]*job
	order []string
	nodes map[string]*node
	holds map[holdKey]*holdUse // attempts held and not yet released
}

// job is one job's history as read.
type job struct {
	facts []fact
}

// fact is one event of a job, reduced to what the record and the checks
// need, so that a million of them fit in memory.
type fact struct {
	seq    uint64
	typ    string
	id     string
	at     time.Time
	digest [32]byte
	ev     events.Event // slimmed: see slim
	repeat bool         // the job's log already held this ce-id
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
}

// New returns an empty Auditor.
func New(opts Options) *Auditor {
	a := &Auditor{opts: opts, heads: map[uint64][]headCheck{}, jobs: map[string]*job{}, nodes: map[string]*node{},
		holds: map[holdKey]*holdUse{}}
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
	if a.seen.has(m.Seq) {
		a.find(Finding{Job: subj.Job, Seq: m.Seq, Kind: Duplicate, Detail: fmt.Sprintf("message #%d appears twice in the log", m.Seq)})
		return
	}
	if m.Seq < a.rep.LastSeq {
		a.find(Finding{Job: subj.Job, Seq: m.Seq, Kind: Order, Detail: fmt.Sprintf("message #%d comes after #%d: out of stream order", m.Seq, a.rep.LastSeq)})
	}
	a.seen.set(m.Seq)
	a.rep.LastSeq = max(a.rep.LastSeq, m.Seq)
	if d.err != nil {
		if subj.ClientKind() {
			// Anyone allowed to submit can publish garbage on its own tail
			// of any job's subjects: it is the client's fault, not the
			// log's, and it changes no job. Only a job's first request,
			// readable or not, says what the job is: SUBMIT refuses an
			// unreadable one with a JobRejected that names the problem.
			a.rep.SetAside++
			job := subj.Job
			if subj.IsRequest() && !events.IsUnknownType(d.err) && a.unreadable[job] == 0 && !a.requested(job) {
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
	if !subj.ClientKind() {
		// A client's request may carry any id: it is the client's own
		// publish, checked by no service, and changes nothing but as
		// what it asks. The services' events must carry theirs.
		for _, w := range d.wrong {
			a.find(Finding{Job: env.Subject, Seq: env.Seq, Kind: Inconsistent, Detail: w})
		}
	}
	f := fact{seq: env.Seq, typ: typeNames[env.Type], id: d.id, at: env.Time.UTC(), digest: d.digest, ev: env.Event}
	if subj.Space == events.SpaceNode {
		a.nodeEvent(f, env.Subject)
		return
	}
	j := a.jobs[env.Subject]
	if j == nil {
		// Most jobs have eight events or fewer; the id is cloned so that
		// it does not hold the header block it came in.
		j = &job{facts: make([]fact, 0, 8)}
		id := strings.Clone(env.Subject)
		a.jobs[id] = j
		a.order = append(a.order, id)
	}
	for i := range j.facts {
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
	}
}

// requested reports whether a readable request of job has been read.
func (a *Auditor) requested(job string) bool {
	if j := a.jobs[job]; j != nil {
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
	for _, g := range a.seen.gaps(a.rep.LastSeq) {
		detail := fmt.Sprintf("message #%d is missing from the log", g[0])
		if g[1] > g[0] {
			detail = fmt.Sprintf("messages #%d to #%d are missing from the log", g[0], g[1])
		}
		a.find(Finding{Seq: g[0], Kind: Gap, Detail: detail})
	}
	// Jobs are independent: derive them on every core.
	type result struct {
		rec      *hold.HoldRecord
		findings []Finding
		setAside int
	}
	results := make([]result, len(a.order))
	workers := a.opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var wg sync.WaitGroup
	chunk := (len(a.order) + workers - 1) / max(workers, 1)
	for start := 0; start < len(a.order); start += max(chunk, 1) {
		end := min(start+max(chunk, 1), len(a.order))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := start; i < end; i++ {
				rec, fs, aside := derive(a.order[i], a.jobs[a.order[i]].facts, a.unreadable[a.order[i]])
				results[i] = result{rec, fs, aside}
			}
		}()
	}
	wg.Wait()
	a.rep.Records = make(map[string]*hold.HoldRecord, len(a.order))
	for i, id := range a.order {
		a.rep.Records[id] = results[i].rec
		a.rep.Findings = append(a.rep.Findings, results[i].findings...)
		a.rep.SetAside += results[i].setAside
	}
	a.rep.Jobs = len(a.order)
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

// bitset records which sequences were read.
type bitset []uint64

func (b *bitset) set(n uint64) {
	i := int(n / 64)
	for i >= len(*b) {
		*b = append(*b, 0)
	}
	(*b)[i] |= 1 << (n % 64)
}

func (b bitset) has(n uint64) bool {
	i := int(n / 64)
	return i < len(b) && b[i]&(1<<(n%64)) != 0
}

// gaps lists the ranges of sequences from 1 to last that were not read.
func (b bitset) gaps(last uint64) [][2]uint64 {
	var out [][2]uint64
	for n := uint64(1); n <= last; n++ {
		if b.has(n) {
			continue
		}
		start := n
		for n+1 <= last && !b.has(n+1) {
			n++
		}
		out = append(out, [2]uint64{start, n})
	}
	return out
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
