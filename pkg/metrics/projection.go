package metrics

import (
	"maps"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// gib is the meter's unit of memory, as in the ledger: memory_gib_seconds.
const gib = 1 << 30

// Labels of e31_events_total for messages that are not events this version
// can fold: kept to two, so that whoever can publish cannot grow the set.
const (
	TypeUnknown     = "unknown"
	TypeUndecodable = "undecodable"
	// TypeSetAside labels a node's start or stop of an attempt another
	// node held (events.FromHolder), counted here and not under its type:
	// the word of a node that speaks for jobs it does not hold.
	TypeSetAside = "set_aside"
)

// IsolationUnknown labels the nodes that announced no isolation (nodes older
// than the field).
const IsolationUnknown = "unknown"

// States are the job states e31_jobs reports, always all of them, in the
// order of a job's life. The last three are over.
var States = []string{hold.StateSubmitted, hold.StateWaiting, hold.StateHeld, hold.StateRunning, hold.StateStopped,
	hold.StateReturned, hold.StateReleased, hold.StateRejected, hold.StateCancelled}

// Outcomes are the final outcomes e31_jobs_finished_total always reports,
// so that a rate over them exists before the first job ends so: every
// outcome there is (events.Outcomes). Any other the log shows, a newer
// writer's, is reported too.
var Outcomes = events.Outcomes[:]

// DurationBuckets are the upper bounds, in seconds, of the histograms of a
// job's steps: from a few milliseconds (a free pool) to a day (a long queue).
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600}

// Resources are what a node offers or a hold takes.
type Resources struct {
	CPU         float64
	MemoryBytes int64
	GPU         int
	DiskBytes   int64
}

func (r Resources) add(o Resources, sign int) Resources {
	r.CPU += float64(sign) * o.CPU
	r.MemoryBytes += int64(sign) * o.MemoryBytes
	r.GPU += sign * o.GPU
	r.DiskBytes += int64(sign) * o.DiskBytes
	return r
}

// Meter is what one submitter held, summed over released attempts, in the
// units of the hold record.
type Meter struct {
	HeldSeconds      float64
	CPUCoreSeconds   float64
	MemoryGiBSeconds float64
	GPUSeconds       float64
	// LostSeconds is the held time of attempts released node_lost: not
	// billed, so in none of the figures above (e31 ledger --totals agrees).
	LostSeconds float64
}

// Node is what the log says about one node.
type Node struct {
	// Announced is false for a node known only from holds on it.
	Announced bool
	// Up is false once its lease expired, until it announces itself again.
	Up        bool
	Isolation string
	Capacity  Resources
	// Held is what the attempts held on it and not yet released take.
	Held Resources
	// Withdrawn are the devices it withdrew (DeviceWithdrawn) and has not
	// restored since, by UUID, with why: they take no job.
	Withdrawn map[string]string
}

// Histogram is a distribution of durations in seconds over DurationBuckets.
type Histogram struct {
	// Counts has one count per bucket of DurationBuckets (not cumulative),
	// and a last one for what is above them all.
	Counts []uint64
	Count  uint64
	Sum    float64
}

// observe adds one duration. A negative one (clocks of two services that
// disagree) is counted as zero rather than dropped: the count must match
// the steps taken.
func (h *Histogram) observe(d time.Duration) {
	if h.Counts == nil {
		h.Counts = make([]uint64, len(DurationBuckets)+1)
	}
	s := max(d.Seconds(), 0)
	i := 0
	for i < len(DurationBuckets) && s > DurationBuckets[i] {
		i++
	}
	h.Counts[i]++
	h.Count++
	h.Sum += s
}

// Cumulative is the histogram as Prometheus counts it: for each upper bound,
// how many observations were at most that.
func (h Histogram) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(DurationBuckets))
	var n uint64
	for i, b := range DurationBuckets {
		if h.Counts != nil {
			n += h.Counts[i]
		}
		out[b] = n
	}
	return out
}

func (h Histogram) clone() Histogram {
	h.Counts = append([]uint64(nil), h.Counts...)
	return h
}

// Figures are the projection's figures at one point of the log.
type Figures struct {
	// Applied is the last stream sequence folded in.
	Applied uint64
	// Jobs counts the jobs in each state; States lists them all.
	Jobs map[string]int
	// Finished counts the jobs over, by final outcome.
	Finished map[events.Outcome]int
	// Meter is per submitter.
	Meter                map[string]Meter
	Wait, Start, Release Histogram
	Nodes                map[string]Node
	// Events counts the messages read, by ce-type or TypeUnknown,
	// TypeUndecodable or TypeSetAside.
	Events map[string]uint64
}

// Projection folds the log into Figures. It keeps each live job's state and
// forgets a job once it is over. Folding an event at or below the last
// applied sequence, or an event its job already shows (the same kind for
// the same attempt, stored again past the duplicate window), changes
// nothing. It is not safe for concurrent use.
type Projection struct {
	applied  uint64
	jobs     map[string]*job
	states   map[string]int
	finished map[events.Outcome]int
	meter    map[string]*Meter
	wait     Histogram
	start    Histogram
	release  Histogram
	nodes    map[string]*Node
	boots    map[string]string
	events   map[string]uint64
	devices  *events.DeviceStates
}

// job is what the projection keeps about a live job.
type job struct {
	state     string
	submitter string
	// waitingSince is when it last started to wait for compute: its
	// submission, or the release of an attempt whose node was lost.
	waitingSince time.Time
	submitted    bool
	attempts     []attempt
	// released is the highest attempt released: what comes later about it
	// (a lost node's late report) changes nothing.
	released int
}

// attempt is one live attempt of a job: held, not yet released.
type attempt struct {
	n         int
	node      string
	held      Resources
	heldAt    time.Time
	limit     time.Duration // the job's declared limit: the hold ends by heldAt+limit
	stoppedAt time.Time
	outcome   events.Outcome
	seen      kinds
}

// kinds is a set of the per-attempt event kinds an attempt has shown.
type kinds uint8

const (
	kindHeld kinds = 1 << iota
	kindStarted
	kindStopped
	kindLost
	kindReturned
	kindExpired // RENT ended it at its limit plus grace: a later stop is set aside
)

// NewProjection returns a projection of an empty log.
func NewProjection() *Projection {
	return &Projection{
		jobs:     map[string]*job{},
		states:   map[string]int{},
		finished: map[events.Outcome]int{},
		meter:    map[string]*Meter{},
		nodes:    map[string]*Node{},
		boots:    map[string]string{},
		events:   map[string]uint64{},
		devices:  events.NewDeviceStates(),
	}
}

// Applied is the last stream sequence folded in.
func (p *Projection) Applied() uint64 { return p.applied }

// Live is the number of jobs not yet over: what the projection's memory
// grows with.
func (p *Projection) Live() int { return len(p.jobs) }

// Skip counts a message at seq that is not an event this version can fold:
// of a type it does not know (unknown true), or not a valid event at all.
func (p *Projection) Skip(seq uint64, unknown bool) {
	if seq != 0 && seq <= p.applied {
		return
	}
	p.applied = max(p.applied, seq)
	if unknown {
		p.events[TypeUnknown]++
	} else {
		p.events[TypeUndecodable]++
	}
}

// Apply folds one event in. Events read back from the stream carry their
// sequence; one built in memory (Seq 0) is always folded.
func (p *Projection) Apply(env events.Envelope) {
	if env.Seq != 0 && env.Seq <= p.applied {
		return
	}
	p.applied = max(p.applied, env.Seq)
	if !p.fromHolder(env) {
		p.events[TypeSetAside]++
		return
	}
	p.events[env.Event.Type()]++
	at := env.Time
	switch e := env.Event.(type) {
	case *events.NodeAnnounced:
		p.announce(e)
		p.devices.Apply(e)
	case *events.DeviceWithdrawn, *events.DeviceRestored:
		p.devices.Apply(e)
	case *events.NodeExpired:
		if n := p.nodes[e.Node]; n != nil && p.boots[e.Node] == e.Boot {
			n.Up = false
		}
	case *events.JobRequested:
		// A request under the id of a job already over and forgotten
		// (which SUBMIT refuses to the poison stream) looks like a new
		// one and stays submitted: telling them apart would mean keeping
		// every id ever used. Clients request only ids with no events, so
		// only a broken or hostile client does this (one entry each).
		if p.jobs[env.Subject] == nil {
			p.newJob(env.Subject, e.Submitter)
		}
	case *events.JobSubmitted:
		j := p.jobs[env.Subject]
		if j == nil {
			j = p.newJob(env.Subject, e.Submitter)
		}
		if j.submitted {
			return
		}
		j.submitted, j.submitter, j.waitingSince = true, e.Submitter, at
		p.setState(j, hold.StateWaiting)
	case *events.JobRejected:
		p.end(env.Subject, hold.StateRejected, events.Rejected)
	case *events.JobCancelled:
		p.end(env.Subject, hold.StateCancelled, events.Cancelled)
	case *events.ComputeHeld:
		j, a := p.attempt(env.Subject, e.Attempt, kindHeld)
		if a == nil {
			return
		}
		a.node, a.heldAt = e.Node, at
		a.limit = time.Duration(e.Spec.Request.LimitSeconds * float64(time.Second))
		a.held = Resources{CPU: e.CPU, MemoryBytes: e.MemoryBytes, GPU: e.GPU, DiskBytes: e.DiskBytes}
		if j.submitter == "" {
			j.submitter = e.Submitter
		}
		if !j.waitingSince.IsZero() {
			p.wait.observe(at.Sub(j.waitingSince))
			j.waitingSince = time.Time{}
		}
		n := p.node(e.Node)
		n.Held = n.Held.add(a.held, 1)
		p.setState(j, hold.StateHeld)
	case *events.RunStarted:
		j, a := p.attempt(env.Subject, e.Attempt, kindStarted)
		if a == nil {
			return
		}
		if !a.heldAt.IsZero() {
			p.start.observe(at.Sub(a.heldAt))
		}
		p.setState(j, hold.StateRunning)
	case *events.RunStopped:
		j, a := p.attempt(env.Subject, e.Attempt, kindStopped)
		if a == nil || a.seen&kindExpired != 0 {
			return
		}
		a.stoppedAt, a.outcome = at, e.Outcome
		p.setState(j, hold.StateStopped)
	case *events.HoldLost:
		j, a := p.attempt(env.Subject, e.Attempt, kindLost)
		if a == nil {
			return
		}
		if a.stoppedAt.IsZero() {
			a.stoppedAt = at
		}
		a.outcome = events.NodeLost
		p.setState(j, hold.StateStopped)
	case *events.HoldExpired:
		j, a := p.attempt(env.Subject, e.Attempt, kindExpired)
		if a == nil {
			return
		}
		a.stoppedAt, a.outcome = at, events.LimitExceeded
		p.setState(j, hold.StateStopped)
	case *events.OutputReturned:
		j, a := p.attempt(env.Subject, e.Attempt, kindReturned)
		if a == nil {
			return
		}
		a.outcome = e.Outcome
		p.setState(j, hold.StateReturned)
	case *events.ComputeReleased:
		p.released(env.Subject, e, at)
	}
	// CancelRequested, DeleteRequested and Deleted change no figure: a
	// cancel shows in the events that follow it, and deletions come after
	// the job is over.
}

// announce puts a node in the pool, or back in it after a restart.
func (p *Projection) announce(e *events.NodeAnnounced) {
	n := p.node(e.Node)
	iso := string(e.Isolation)
	if iso == "" {
		iso = IsolationUnknown
	}
	n.Announced, n.Up, n.Isolation = true, true, iso
	n.Capacity = Resources{CPU: e.CPU, MemoryBytes: e.MemoryBytes, GPU: e.GPU, DiskBytes: e.DiskBytes}
	p.boots[e.Node] = strings.Clone(e.Boot)
}

// node returns the node of that name, making it if needed.
func (p *Projection) node(name string) *Node {
	n := p.nodes[name]
	if n == nil {
		// Strings decoded from a message share its buffer: what the
		// projection keeps is copied, so that it keeps no message.
		n = &Node{}
		p.nodes[strings.Clone(name)] = n
	}
	return n
}

func (p *Projection) newJob(id, submitter string) *job {
	j := &job{state: hold.StateSubmitted, submitter: strings.Clone(submitter)}
	p.jobs[strings.Clone(id)] = j
	p.states[j.state]++
	return j
}

func (p *Projection) setState(j *job, s string) {
	p.states[j.state]--
	p.states[s]++
	j.state = s
}

// end counts a job over and forgets it. A job the projection never saw
// (a request so malformed it did not decode, then rejected) is counted too.
func (p *Projection) end(id, state string, outcome events.Outcome) {
	if j := p.jobs[id]; j != nil {
		p.states[j.state]--
		for _, a := range j.attempts {
			// An attempt still held when its job ends is released by
			// no event: give its node back here so the pool adds up.
			if n := p.nodes[a.node]; n != nil && !a.heldAt.IsZero() {
				n.Held = n.Held.add(a.held, -1)
			}
		}
		delete(p.jobs, id)
	}
	p.states[state]++
	p.finished[outcome]++
}

// attempt returns a live job and its attempt n, marking kind seen. It
// returns a nil attempt when the event changes nothing: its job is unknown
// or over, the attempt was released, or the attempt already showed kind.
func (p *Projection) attempt(id string, n int, kind kinds) (*job, *attempt) {
	j := p.jobs[id]
	if j == nil || n <= j.released {
		return nil, nil
	}
	for i := range j.attempts {
		a := &j.attempts[i]
		if a.n == n {
			if a.seen&kind != 0 {
				return nil, nil
			}
			a.seen |= kind
			return j, a
		}
	}
	j.attempts = append(j.attempts, attempt{n: n, seen: kind})
	return j, &j.attempts[len(j.attempts)-1]
}

// fromHolder reports whether env may count: any event but a node's start
// or stop may; those only from the node their attempt was held on.
func (p *Projection) fromHolder(env events.Envelope) bool {
	if _, ok := events.SenderOf(env.Event); !ok {
		return true
	}
	held := ""
	if j := p.jobs[env.Subject]; j != nil {
		for i := range j.attempts {
			if a := &j.attempts[i]; a.n == env.Attempt() && a.seen&kindHeld != 0 {
				held = a.node
			}
		}
	}
	return events.FromHolder(env.Event, held)
}

// released stops the meter of one attempt and, if it was the last, ends
// the job with the attempt's outcome (the hold record's outcome: what the
// attempt's stop, loss or returned output said, else the release's).
func (p *Projection) released(id string, e *events.ComputeReleased, at time.Time) {
	j := p.jobs[id]
	if j == nil || e.Attempt <= j.released {
		return
	}
	var a attempt
	for i := range j.attempts {
		if j.attempts[i].n == e.Attempt {
			a = j.attempts[i]
			j.attempts = append(j.attempts[:i], j.attempts[i+1:]...)
			break
		}
	}
	j.released = e.Attempt
	if !a.heldAt.IsZero() {
		held := max(at.Sub(a.heldAt).Seconds(), 0)
		m := p.meter[j.submitter]
		if m == nil {
			m = &Meter{}
			p.meter[j.submitter] = m
		}
		if e.Outcome == events.NodeLost {
			m.LostSeconds += held
		} else {
			m.HeldSeconds += held
			m.CPUCoreSeconds += a.held.CPU * held
			m.MemoryGiBSeconds += float64(a.held.MemoryBytes) / gib * held
			m.GPUSeconds += float64(a.held.GPU) * held
		}
		if n := p.nodes[a.node]; n != nil {
			n.Held = n.Held.add(a.held, -1)
		}
	}
	if !a.stoppedAt.IsZero() {
		p.release.observe(at.Sub(a.stoppedAt))
	}
	if !e.Final {
		j.waitingSince = at
		p.setState(j, hold.StateWaiting)
		return
	}
	outcome := a.outcome
	if outcome == "" {
		outcome = e.Outcome
	}
	j.attempts = nil
	p.end(id, hold.StateReleased, outcome)
}

// Overrun is the longest any hold still open at now has outlived its
// job's limit, or zero if none has. A hold ends by its limit (SIGKILL at
// the limit, then the release): one that lasts well past it is a step that
// is stuck or a node that is gone unnoticed, and the meter runs meanwhile.
func (p *Projection) Overrun(now time.Time) time.Duration {
	var worst time.Duration
	for _, j := range p.jobs {
		for _, a := range j.attempts {
			if a.heldAt.IsZero() || a.limit <= 0 {
				continue
			}
			worst = max(worst, now.Sub(a.heldAt.Add(a.limit)))
		}
	}
	return worst
}

// Figures returns a copy of the figures, which the projection does not
// change afterwards.
func (p *Projection) Figures() Figures {
	f := Figures{
		Applied:  p.applied,
		Jobs:     make(map[string]int, len(States)),
		Finished: maps.Clone(p.finished),
		Meter:    make(map[string]Meter, len(p.meter)),
		Wait:     p.wait.clone(),
		Start:    p.start.clone(),
		Release:  p.release.clone(),
		Nodes:    make(map[string]Node, len(p.nodes)),
		Events:   maps.Clone(p.events),
	}
	for s, n := range p.states {
		if n != 0 {
			f.Jobs[s] = n
		}
	}
	for s, m := range p.meter {
		f.Meter[s] = *m
	}
	for name, n := range p.nodes {
		c := *n
		c.Withdrawn = maps.Clone(p.devices.Withdrawn(name))
		f.Nodes[name] = c
	}
	return f
}
