package rent

import (
	"container/list"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/e31net/e31/pkg/api"
	"github.com/e31net/e31/pkg/events"
)

// res is an amount of compute. CPU is in thousandths of a core so that
// holding and releasing fractions never drifts.
type res struct {
	milliCPU int64
	memory   int64
	gpu      int64
	disk     int64
}

func resOf(cpu float64, memory int64, gpu int, disk int64) res {
	return res{milliCPU: int64(math.Round(cpu * 1000)), memory: memory, gpu: int64(gpu), disk: disk}
}

func (a res) fits(b res) bool {
	return a.milliCPU <= b.milliCPU && a.memory <= b.memory && a.gpu <= b.gpu && a.disk <= b.disk
}
func (a res) minus(b res) res {
	return res{a.milliCPU - b.milliCPU, a.memory - b.memory, a.gpu - b.gpu, a.disk - b.disk}
}
func (a res) plus(b res) res {
	return res{a.milliCPU + b.milliCPU, a.memory + b.memory, a.gpu + b.gpu, a.disk + b.disk}
}

type node struct {
	name string
	boot string
	cap  res
	used res
}

type jobState int

const (
	waiting jobState = iota
	held
)

type job struct {
	id        string
	order     uint64 // sequence of JobSubmitted: the place in the queue
	last      uint64 // the job's last event: what a decision expects
	submitter string
	spec      events.JobSpec
	need      res
	attempt   int // the last attempt held; 0 before the first
	state     jobState
	node      string
	cancel    bool // a cancel was requested
	elem      *list.Element
}

// Pool is RENT's view of the world, built only from events: the nodes and
// what each has free, the jobs waiting in order and those held. It does no
// I/O; the Service feeds it events and publishes what it decides. It is not
// safe for concurrent use.
type Pool struct {
	nodes   map[string]*node
	jobs    map[string]*job // waiting or held
	over    map[string]bool // ended: late or repeated events change nothing
	queue   *list.List      // waiting jobs by order
	early   map[string]bool // cancels seen before the job was submitted
	cancels map[string]bool // waiting jobs to be cancelled
	applied uint64
}

// NewPool returns an empty pool.
func NewPool() *Pool {
	return &Pool{
		nodes: map[string]*node{}, jobs: map[string]*job{}, over: map[string]bool{},
		queue: list.New(), early: map[string]bool{}, cancels: map[string]bool{},
	}
}

// Applied is the last sequence the pool has applied.
func (p *Pool) Applied() uint64 { return p.applied }

// Apply folds one event into the pool. Applying an event twice, or an event
// older than one already applied for the same job, changes nothing.
func (p *Pool) Apply(env events.Envelope) {
	if env.Seq > p.applied {
		p.applied = env.Seq
	}
	switch e := env.Event.(type) {
	case *events.NodeAnnounced:
		n := p.nodes[e.Node]
		if n == nil {
			n = &node{name: e.Node}
			p.nodes[e.Node] = n
		}
		// A re-announced node keeps what is held on it: those holds end
		// through their own events.
		n.boot = e.Boot
		n.cap = resOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes)
		return
	}
	id := env.Subject
	if p.over[id] {
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
			need: resOf(r.CPU, r.MemoryBytes, r.GPU, r.DiskBytes)}
		p.jobs[id] = j
		p.enqueue(j)
		if p.early[id] {
			delete(p.early, id)
			j.cancel = true
			p.cancels[id] = true
		}
	case *events.CancelRequested:
		if j == nil {
			p.early[id] = true
			return
		}
		j.cancel = true
		if j.state == waiting {
			p.cancels[id] = true
		}
	case *events.ComputeHeld:
		if j == nil || e.Attempt <= j.attempt {
			return
		}
		n := p.nodes[e.Node]
		if n == nil {
			// A hold on a node this pool never saw announced: count it, so
			// that the node is not held beyond what it has once it appears.
			n = &node{name: e.Node}
			p.nodes[e.Node] = n
		}
		p.queue.Remove(j.elem)
		j.elem = nil
		j.state, j.attempt, j.node = held, e.Attempt, e.Node
		n.used = n.used.plus(resOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes))
		delete(p.cancels, id)
	case *events.ComputeReleased:
		if j == nil || j.state != held || e.Attempt != j.attempt {
			return
		}
		if n := p.nodes[j.node]; n != nil {
			n.used = n.used.minus(resOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes))
		}
		j.node = ""
		if e.Final {
			p.end(id)
			return
		}
		j.state = waiting
		p.enqueue(j)
		if j.cancel {
			p.cancels[id] = true
		}
	case *events.JobRejected, *events.JobCancelled:
		p.end(id)
	}
}

func (p *Pool) end(id string) {
	if j := p.jobs[id]; j != nil && j.elem != nil {
		p.queue.Remove(j.elem)
	}
	delete(p.jobs, id)
	delete(p.cancels, id)
	delete(p.early, id)
	p.over[id] = true
}

// enqueue puts j in its place: by the order it was submitted in, so a job
// held again after its node was lost goes back ahead of later jobs.
func (p *Pool) enqueue(j *job) {
	for e := p.queue.Back(); e != nil; e = e.Prev() {
		if e.Value.(*job).order < j.order {
			j.elem = p.queue.InsertAfter(j, e)
			return
		}
	}
	j.elem = p.queue.PushFront(j)
}

// Decision is an event the pool wants appended to a job's log, valid only
// while Expect is still the job's last sequence.
type Decision struct {
	Job    string
	Event  events.Event
	Expect uint64
}

// Decide returns what should happen now: cancellations of waiting jobs, then
// holds for the jobs at the head of the queue that fit. Jobs are held in
// the order they were submitted; a job that fits some node but not now
// makes the jobs behind it wait. A job that no node could ever hold does not
// block the queue. At most max holds are returned.
func (p *Pool) Decide(max int) []Decision {
	var out []Decision
	for id := range p.cancels {
		j := p.jobs[id]
		out = append(out, Decision{Job: id, Event: events.JobCancelled{Reason: "cancelled while waiting for compute"}, Expect: j.last})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Job < out[b].Job })
	if len(p.nodes) == 0 {
		return out
	}
	free := make(map[string]res, len(p.nodes))
	for name, n := range p.nodes {
		free[name] = n.cap.minus(n.used)
	}
	holds := 0
	for e := p.queue.Front(); e != nil && holds < max; e = e.Next() {
		j := e.Value.(*job)
		if j.cancel {
			continue
		}
		name := p.pick(free, j.need)
		if name == "" {
			if p.everFits(j.need) {
				break
			}
			continue
		}
		free[name] = free[name].minus(j.need)
		r := j.spec.Request
		out = append(out, Decision{Job: j.id, Expect: j.last, Event: events.ComputeHeld{
			Hold: events.Hold{Attempt: j.attempt + 1, Node: name, CPU: r.CPU, MemoryBytes: r.MemoryBytes,
				GPU: r.GPU, DiskBytes: r.DiskBytes},
			Submitter: j.submitter,
			Spec:      j.spec,
		}})
		holds++
	}
	return out
}

// pick chooses the node with the most free cpu that fits need (spreading
// work over the pool), by name among equals so that decisions are
// repeatable.
func (p *Pool) pick(free map[string]res, need res) string {
	best := ""
	for name, f := range free {
		if !need.fits(f) {
			continue
		}
		if best == "" || f.milliCPU > free[best].milliCPU || (f.milliCPU == free[best].milliCPU && name < best) {
			best = name
		}
	}
	return best
}

func (p *Pool) everFits(need res) bool {
	for _, n := range p.nodes {
		if need.fits(n.cap) {
			return true
		}
	}
	return false
}

// Why explains where a job is, in words a person understands.
func (p *Pool) Why(id string) api.WhyReply {
	r := api.WhyReply{Job: id, Queued: p.queue.Len()}
	if p.over[id] {
		r.State = "over"
		return r
	}
	j := p.jobs[id]
	if j == nil {
		r.State = "unknown"
		r.Reason = "the scheduler has not seen this job (not yet accepted, or no such job)"
		return r
	}
	if j.state == held {
		r.State = api.StateHeld
		r.Reason = "compute is held on " + j.node
		return r
	}
	r.State = api.StateWaiting
	pos := 1
	for e := p.queue.Front(); e != nil && e.Value.(*job) != j; e = e.Next() {
		pos++
	}
	r.Position = pos
	switch {
	case j.cancel:
		r.Reason = "cancel requested; it will not be held"
	case len(p.nodes) == 0:
		r.Reason = "no compute node has joined the pool yet"
	case !p.everFits(j.need):
		r.Reason = fmt.Sprintf("needs %s; the largest node has %s: no node in the pool can ever hold it", describe(j.need), describe(p.largest()))
	case pos == 1:
		r.Reason = fmt.Sprintf("next in line: needs %s; the node with the most free has %s (%s in all)", describe(j.need), describe(p.mostFree()), describe(p.total()))
	default:
		r.Reason = fmt.Sprintf("position %d in the queue: %d jobs submitted earlier wait ahead of it; it needs %s", pos, pos-1, describe(j.need))
	}
	return r
}

func (p *Pool) largest() res {
	var best res
	for _, n := range p.nodes {
		if n.cap.milliCPU > best.milliCPU || (n.cap.milliCPU == best.milliCPU && n.cap.memory > best.memory) {
			best = n.cap
		}
	}
	return best
}

func (p *Pool) mostFree() res {
	var best res
	for _, n := range p.nodes {
		f := n.cap.minus(n.used)
		if f.milliCPU > best.milliCPU || (f.milliCPU == best.milliCPU && f.memory > best.memory) {
			best = f
		}
	}
	return best
}

func (p *Pool) total() res {
	var t res
	for _, n := range p.nodes {
		t = t.plus(n.cap)
	}
	return t
}

func describe(r res) string {
	parts := []string{
		fmt.Sprintf("%g cpu", float64(r.milliCPU)/1000),
		humanBytes(r.memory) + " memory",
	}
	if r.gpu > 0 {
		parts = append(parts, fmt.Sprintf("%d gpu", r.gpu))
	}
	return strings.Join(parts, ", ")
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.3g %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
