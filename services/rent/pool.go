package rent

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// Pool is RENT's view of the world, built only from events: the nodes and
// what each has free, the jobs waiting in order and those placed. It does
// no I/O; the Service feeds it events and publishes what it decides. It is
// not safe for concurrent use.
//
// It folds the events (Apply) and keeps the jobs live; the rest is its
// parts, each in a file of its own: the nodes (nodeSet, node.go), the queue
// (queue, queue.go), where a job goes (placer, place.go), what it forgets
// (recent and earlyCancels, forget.go) and the explanations (why.go).
//
// The order in which waiting jobs are held: higher priority first; within a
// priority, the submitter holding the least cpu now (fair share), so one
// submitter's ten thousand jobs do not shut out another's one; then the
// order of submission. The first job in that order that does not fit gets a
// reservation: the node and time at which it will fit, known exactly
// because every job placed declared its limit. Later jobs may start ahead
// of it (backfill) only where they cannot delay that reservation.
//
// Where a job may be placed: a node whose free cpu, memory, gpu and disk
// cover its request, on the disk its staged inputs too (they are written
// there); that runs containers if it names an image; and that is isolated,
// or whose operator allowed it to run jobs unisolated. A job that no such
// node could ever hold is rejected when it first enters the queue, judged
// against the live nodes and those lost less than RememberLost ago; that
// judgement is never made again, so a job held once, or accepted, waits
// through any node's loss rather than being rejected for it.
type Pool struct {
	cfg   PoolConfig
	now   func() time.Time
	nodes nodeSet
	jobs  map[string]*job // blocked, waiting or placed
	// over holds the outcomes of the jobs that ended most recently
	// (RememberEnded of them), so that a late or repeated event about one
	// changes nothing and a dependent learns its outcome at once. Older
	// ones are forgotten: the pool's heap is bounded by the jobs live, not
	// by every job there ever was. A dependent of a job forgotten is
	// blocked until the Service has read that job's outcome from the log
	// (Unresolved, Resolve).
	over recent[events.Outcome]
	// unresolved holds the jobs that jobs run after that the pool does not
	// know, neither live nor recently ended: not accepted yet, or ended and
	// forgotten. The Service reads each one's outcome from the log.
	unresolved map[string]bool
	queue      queue
	usage      map[string]int64  // milli-cpu placed, by submitter
	after      map[string][]*job // dependents waiting for a job
	early      earlyCancels
	// attention holds the jobs that may need a decision other than a
	// placement: a cancel, a rejection, or a first check that some node
	// could hold them. Decide looks at these only, so a long queue costs
	// nothing here.
	attention map[string]*job
	// unchecked holds jobs queued while no node was live: once one
	// announces, they need the check whether any node could hold them.
	unchecked map[string]*job
	// outBytes is the size of the output a job returned (its last
	// attempt's), until it ends: what staging it takes on the node of a job
	// that reads it and was submitted before it was there to be sized.
	outBytes map[string]int64
	applied  uint64
	placer   placer
	// meter ends the attempts whose node has not reported their stop by
	// their deadline (overrun.go).
	meter meter
	// sweeps are the sweeps' cancels it remembers (sweep.go).
	sweeps sweepCancels
}

// NewPool returns an empty pool that tells time with now (nil: time.Now).
func NewPool(cfg PoolConfig, now func() time.Time) *Pool {
	cfg = cfg.withDefaults()
	if now == nil {
		now = time.Now
	}
	return &Pool{
		cfg: cfg, now: now,
		nodes: nodeSet{all: map[string]*node{}}, jobs: map[string]*job{},
		over: newRecent[events.Outcome](cfg.RememberEnded), unresolved: map[string]bool{},
		queue: newQueue(), usage: map[string]int64{}, after: map[string][]*job{},
		early:     newEarlyCancels(cfg.RememberEnded),
		attention: map[string]*job{}, unchecked: map[string]*job{}, outBytes: map[string]int64{},
		placer: placer{grace: cfg.Grace, maxScan: cfg.MaxScan},
		meter:  meter{grace: cfg.Grace},
		sweeps: newSweepCancels(),
	}
}

// Applied is the last sequence the pool has applied.
func (p *Pool) Applied() uint64 { return p.applied }

// Waiting is the number of jobs in the queue.
func (p *Pool) Waiting() int { return p.queue.len() }

// WaitingBySubmitter is the number of jobs in the queue of each submitter
// with any waiting.
func (p *Pool) WaitingBySubmitter() map[string]int { return p.queue.bySubmitter() }

// Nodes is the number of nodes the pool knows, live or not.
func (p *Pool) Nodes() int { return len(p.nodes.all) }

// Leased lists, sorted, the nodes the pool counts live: those whose lease
// it has not seen lapse. RENT checks their leases, and records NodeExpired
// for one whose lease is gone.
func (p *Pool) Leased() []string { return p.nodes.leased() }

// LeasedBoot is the boot of node name if the pool counts it live: what a
// NodeExpired for it must name, so that a node that came back since is not
// taken for lost.
func (p *Pool) LeasedBoot(name string) (boot string, ok bool) {
	if n := p.nodes.all[name]; n != nil && !n.expired {
		return n.boot, true
	}
	return "", false
}

// Touch records that a message was stored at seq on job's subjects,
// whether or not it is an event the pool applies: a request, a deletion,
// or something that is no event at all, which anyone allowed to publish on
// the job's subjects may store. A decision is appended only while the
// job's last sequence is the one the pool knows (Decision.Expect): a
// message the pool had not counted would make every placement of the job
// conflict, for ever, and the job would never be held. It reports whether
// the message moved the last sequence of a job the pool knows.
func (p *Pool) Touch(job string, seq uint64) (moved bool) {
	p.applied = max(p.applied, seq)
	if j := p.jobs[job]; j != nil && seq > j.last {
		j.last = seq
		return true
	}
	return false
}

// Apply folds one event into the pool. Applying an event twice, or an event
// older than one already applied for the same job, changes nothing.
func (p *Pool) Apply(env events.Envelope) {
	if env.Seq > p.applied {
		p.applied = env.Seq
	}
	switch e := env.Event.(type) {
	case *events.NodeAnnounced:
		n := p.nodes.get(e.Node)
		// A re-announced node keeps the jobs placed on it: those end
		// through their own events.
		n.boot, n.expired, n.lostAt = e.Boot, false, time.Time{}
		n.cap = resOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes)
		if len(e.Devices) > 0 || n.devs != nil {
			// By device: what the node lists now, what its jobs still hold.
			n.devs = announced(e.Devices, n.devs)
			n.cap.gpu = int64(len(e.Devices))
		}
		n.containers = e.Labels[events.LabelContainers] == "true"
		// An announcement without isolation (a node older than it, or a
		// synthetic one) is taken as before: the node may hold jobs.
		n.unisolated = e.Isolation == events.IsolationNone && !e.AllowUnisolated
		holdToCard(n, e, p.cfg.Cards)
		p.nodes.changed()
		for id, j := range p.unchecked {
			p.attention[id] = j
			delete(p.unchecked, id)
		}
		return
	case *events.NodeExpired:
		if n := p.nodes.all[e.Node]; n != nil && n.boot == e.Boot && !n.expired {
			n.expired, n.lostAt = true, p.timeOf(env)
			p.nodes.changed()
		}
		return
	case *events.DeviceWithdrawn:
		// Of the node's present boot only: an older boot's word about a
		// device is replaced by the announcement since.
		if n := p.nodes.all[e.Node]; n != nil && n.boot == e.Boot && n.devs != nil {
			n.devs.withdraw(e.Device, e.Reason)
		}
		return
	case *events.DeviceRestored:
		if n := p.nodes.all[e.Node]; n != nil && n.boot == e.Boot && n.devs != nil {
			n.devs.restore(e.Device)
		}
		return
	}
	if c, ok := events.SweepCancel(env.Event); ok {
		p.sweeps.add(SweepCancel{Sweep: strings.Clone(env.Subject), By: strings.Clone(c.By), Round: c.Round})
		cancelSwept(maps.Values(p.jobs), &p.sweeps, p.attention)
		return
	}
	id := env.Subject
	if p.over.has(id) {
		return
	}
	j := p.jobs[id]
	if j != nil && env.Seq > j.last {
		j.last = env.Seq
	}
	switch e := env.Event.(type) {
	case *events.JobSubmitted:
		if j != nil {
			return
		}
		r := e.Spec.Request
		j = &job{id: id, order: env.Seq, last: env.Seq, submitter: e.Submitter, spec: e.Spec,
			need:  resOf(r.CPU, r.MemoryBytes, r.GPU, r.DiskBytes+inputBytes(e.Spec.Data)),
			limit: time.Duration(r.LimitSeconds * float64(time.Second))}
		p.jobs[id] = j
		for _, by := range p.early.submitted(id) {
			if events.MayCancel(by, e.Submitter) {
				j.cancel = true
				p.attention[id] = j
			}
		}
		cancelSwept(slices.Values([]*job{j}), &p.sweeps, p.attention)
		j.state = blocked
		for _, dep := range e.Spec.After {
			switch outcome, ended := p.over.get(dep); {
			case !ended:
				j.pending++
				p.after[dep] = append(p.after[dep], j)
				if p.jobs[dep] == nil {
					p.unresolved[dep] = true
				}
			case outcome != events.Succeeded:
				j.rejection = fmt.Sprintf("job %s, which it runs after, did not succeed (%s)", dep, outcome)
				p.attention[id] = j
			}
		}
		if j.pending == 0 && j.rejection == "" {
			p.enqueue(j)
			p.judge(j, p.timeOf(env))
		}
	case *events.CancelRequested:
		if j == nil {
			// Copies, kept as long as the ended jobs are: the id shares
			// the block of headers it was read with, and By the decoder's
			// buffer (see end).
			p.early.add(strings.Clone(id), env.Seq, strings.Clone(e.By))
			return
		}
		// Only the submitter (or the operator) may cancel a job; anyone
		// else's request is in the log and changes nothing.
		if events.MayCancel(e.By, j.submitter) {
			j.cancel = true
			p.attention[id] = j
		}
	case *events.ComputeHeld:
		if j == nil || e.Attempt <= j.attempt {
			return
		}
		n := p.nodes.get(e.Node)
		p.queue.remove(j)
		j.state, j.attempt, j.node, j.heldAt = placed, e.Attempt, e.Node, env.Time
		j.stopped, j.lost, j.expired = false, false, false
		p.meter.watch(j)
		took := resOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes)
		j.heldDisk = e.DiskBytes
		if n.devs != nil {
			n.devs.take(j.id, e.GPUs)
		}
		n.used = n.used.plus(took)
		n.jobs[j.id] = j
		p.usage[j.submitter] += took.milliCPU
	case *events.RunStopped:
		if j != nil && j.state == placed && e.Attempt == j.attempt {
			if !events.FromHolder(e, j.node) {
				if p.cfg.SetAside != nil {
					p.cfg.SetAside(env, j.node)
				}
				return
			}
			j.stopped = true
			p.meter.unwatch(j)
		}
	case *events.HoldLost:
		if j != nil && j.state == placed && e.Attempt == j.attempt {
			j.lost = true
			p.meter.unwatch(j)
		}
	case *events.HoldExpired:
		if j != nil && j.state == placed && e.Attempt == j.attempt {
			j.expired = true
			p.meter.unwatch(j)
		}
	case *events.OutputReturned:
		if j != nil && e.Attempt == j.attempt {
			p.outBytes[id] = e.Bytes
		}
	case *events.ComputeReleased:
		if j == nil || j.state != placed || e.Attempt != j.attempt {
			return
		}
		p.meter.unwatch(j)
		gave := resOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes)
		if n := p.nodes.all[j.node]; n != nil {
			n.used = n.used.minus(gave)
			delete(n.jobs, j.id)
			if n.devs != nil {
				n.devs.give(j.id)
			}
		}
		p.usage[j.submitter] -= gave.milliCPU
		if p.usage[j.submitter] == 0 {
			delete(p.usage, j.submitter)
		}
		j.node = ""
		if e.Final {
			p.end(id, e.Outcome, p.timeOf(env))
			return
		}
		// Placed again after its node was lost (or its attempt otherwise
		// ended): it was judged when first queued and is not judged again.
		p.enqueue(j)
	case *events.JobRejected:
		p.end(id, events.Rejected, p.timeOf(env))
	case *events.JobCancelled:
		p.end(id, events.Cancelled, p.timeOf(env))
	}
}

// timeOf is when an event happened, by the log; the pool's clock for an
// event that does not say.
func (p *Pool) timeOf(env events.Envelope) time.Time {
	if env.Time.IsZero() {
		return p.now()
	}
	return env.Time
}

// enqueue puts j in the queue (see queue.push). Placed, it left the
// attention of Decide; waiting, a cancel or rejection needs it again.
func (p *Pool) enqueue(j *job) {
	p.queue.push(j)
	if j.cancel || j.rejection != "" {
		p.attention[j.id] = j
	}
}

// end forgets an ended job (keeping its outcome for the jobs that run after
// it) and lets its dependents go on, or rejects them. A dependent that
// stages its output counts that output's size on the node's disk from now.
func (p *Pool) end(id string, outcome events.Outcome, at time.Time) {
	if j := p.jobs[id]; j != nil {
		p.queue.remove(j)
		p.meter.unwatch(j)
	}
	out := p.outBytes[id]
	delete(p.outBytes, id)
	delete(p.jobs, id)
	p.early.ended(id)
	delete(p.attention, id)
	delete(p.unchecked, id)
	delete(p.unresolved, id)
	if !p.over.has(id) {
		// A copy: the event's id shares the block of headers it was read
		// with, which would stay as long as the id is remembered.
		id = strings.Clone(id)
	}
	// Not the outcome decoded: it is a slice of the decoder's buffer
	// (goccy/go-json hands out strings that share it), half a KiB or more,
	// which would stay as long as the job is remembered: for the
	// RememberEnded jobs, most of RENT's heap.
	outcome = kept(outcome)
	p.over.put(id, outcome)
	for _, d := range p.after[id] {
		if d.state != blocked || p.jobs[d.id] != d {
			continue
		}
		if outcome != events.Succeeded {
			if d.rejection == "" {
				d.rejection = fmt.Sprintf("job %s, which it runs after, did not succeed (%s)", id, outcome)
			}
			p.attention[d.id] = d
			continue
		}
		for _, ref := range d.spec.Data {
			if ref.FromJob == id && ref.Digest == "" {
				// SUBMIT could not size it: it did not exist yet.
				d.need.disk += out
			}
		}
		d.pending--
		if d.pending == 0 && d.rejection == "" {
			p.enqueue(d)
			p.judge(d, at)
		}
	}
	delete(p.after, id)
}

// kept is outcome as the pool keeps it, sharing no buffer it was read
// from: the package's constant for a known outcome (a hundred thousand
// remembered jobs share eight strings), a copy of any other.
func kept(outcome events.Outcome) events.Outcome {
	if i := slices.Index(events.Outcomes[:], outcome); i >= 0 {
		return events.Outcomes[i]
	}
	return events.Outcome(strings.Clone(string(outcome)))
}

// Unresolved lists, sorted, the jobs that jobs run after which the pool
// knows nothing of: each is either yet to be accepted, and its events will
// come, or ended so long ago that the pool forgot it, and only the log can
// say how. The Service reads each one's outcome and tells Resolve.
func (p *Pool) Unresolved() []string {
	return slices.Sorted(maps.Keys(p.unresolved))
}

// HasUnresolved reports whether Unresolved has any job, at no cost: the
// Service asks after every event it applies.
func (p *Pool) HasUnresolved() bool { return len(p.unresolved) > 0 }

// Resolve tells the pool what the log says of a job in Unresolved: ended
// with outcome, or not ended (ended false), in which case its own events
// will tell. Its dependents go on, or are rejected, as if it had just ended;
// outBytes is the size of the output its last attempt returned: what a
// dependent that reads it stages.
func (p *Pool) Resolve(id string, ended bool, outcome events.Outcome, outBytes int64) {
	if !p.unresolved[id] {
		return
	}
	delete(p.unresolved, id)
	if !ended || p.jobs[id] != nil {
		return
	}
	p.outBytes[id] = outBytes
	p.end(id, outcome, p.now())
}

// Tracked is how many jobs the pool keeps anything of, live or ended, and
// how many of those are live: what its heap grows with.
func (p *Pool) Tracked() (all, live int) {
	return len(p.jobs) + p.over.len() + p.early.len() + len(p.unresolved) + len(p.after) + len(p.outBytes), len(p.jobs)
}

// Live reports whether the pool knows id as a job that has not ended.
func (p *Pool) Live(id string) bool { return p.jobs[id] != nil }

// judge decides, once, when a job first enters the queue, whether any node
// could ever hold it: a node live now, or one lost no longer than
// RememberLost before, which is likely to come back. A job none of them
// could hold is rejected, unless it asked to wait for a node. The judgement
// is made from the log (the event that queued the job, and its time), so a
// rebuilt pool makes the same one; it is not made again when nodes are lost
// later, nor ever for a job placed once. With no live node at all the job
// is not judged against an empty pool: it waits for the first node to
// announce itself, and Decide judges it then.
func (p *Pool) judge(j *job, at time.Time) {
	if j.attempt > 0 || j.state != waiting || j.spec.WaitForNode || j.cancel || j.rejection != "" {
		return
	}
	live := p.nodes.liveNodes()
	switch {
	case anyCouldHold(live, j) || p.nodes.lostCouldHold(j, at, p.cfg.RememberLost):
	case len(live) == 0:
		p.unchecked[j.id] = j
	default:
		j.rejection = neverFits(&p.nodes, j, live)
		p.attention[j.id] = j
	}
}

// Decision is an event the pool wants appended to a job's (or node's) log,
// valid only while Expect is still the job's last sequence.
type Decision struct {
	Job    string
	Event  events.Event
	Expect uint64
}

// Decide returns what should happen now: rejections and cancellations of
// jobs that will never be held, holds lost with an expired node, attempts
// past their deadline (overrun.go), then placements of waiting jobs in
// order, with backfill (ComputeHeld). At most max placements are returned.
func (p *Pool) Decide(max int) []Decision {
	now := p.now()
	var out []Decision
	for _, j := range byOrder(p.attention) {
		switch {
		case j.state == placed:
			delete(p.attention, j.id)
		case j.cancel:
			out = append(out, Decision{Job: j.id, Expect: j.last, Event: &events.JobCancelled{Reason: "cancelled before compute was held"}})
		case j.rejection != "":
			out = append(out, Decision{Job: j.id, Expect: j.last, Event: &events.JobRejected{Reason: j.rejection}})
		default:
			// Queued while no node was live: judged now that one is.
			delete(p.attention, j.id)
			if p.judge(j, now); j.rejection != "" {
				out = append(out, Decision{Job: j.id, Expect: j.last, Event: &events.JobRejected{Reason: j.rejection}})
			}
		}
	}
	for _, n := range p.nodes.expiredWithJobs() {
		for _, j := range byOrder(n.jobs) {
			if !j.lost && !j.stopped && !j.expired {
				out = append(out, Decision{Job: j.id, Expect: j.last, Event: &events.HoldLost{
					Hold:   j.heldAs(n),
					Reason: fmt.Sprintf("node %s stopped renewing its lease (boot %s): the attempt is lost with it", n.name, n.boot)}})
			}
		}
	}
	out = append(out, p.meter.overruns(now, &p.nodes)...)
	for _, pl := range p.placer.place(p.nodes.liveNodes(), &p.queue, p.usage, now, max) {
		out = append(out, pl.decision(p.cfg.Grace))
	}
	return out
}
