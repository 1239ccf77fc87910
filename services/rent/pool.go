package rent

import (
	"container/heap"
	"container/list"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
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
	// containers says the node runs jobs that name an image.
	containers bool
	expired    bool // its lease lapsed: it holds nothing new until it announces again
	// lostAt is when its lease lapsed (the time of NodeExpired), while
	// expired: for how long it still counts as a node that could hold a job.
	lostAt time.Time
	// unisolated says it announced isolation none without its operator's
	// leave to run jobs so: it holds nothing, and counts for nothing.
	unisolated bool
	holds      map[string]*job
}

type jobState int

const (
	blocked jobState = iota // waiting for the jobs it runs after
	waiting                 // in the queue
	held
)

type job struct {
	id        string
	order     uint64 // sequence of JobSubmitted: the place in the queue
	last      uint64 // the job's last event: what a decision expects
	submitter string
	spec      events.JobSpec
	// need is what a hold of it takes: its request, and on the node's disk
	// its staged inputs beside request.disk.
	need      res
	heldDisk  int64 // the disk its current hold took, as ComputeHeld says
	limit     time.Duration
	attempt   int // the last attempt held; 0 before the first
	state     jobState
	node      string
	heldAt    time.Time
	stopped   bool // the current attempt's RunStopped is logged
	lost      bool // HoldLost is logged for the current attempt
	cancel    bool // a cancel was requested
	pending   int  // jobs of After not yet succeeded
	rejection string
	elem      *list.Element
	queue     *subQueue
}

// subQueue is one submitter's waiting jobs of one priority, in order.
type subQueue struct {
	submitter string
	priority  int
	jobs      *list.List
	index     int // in the heap of its level, during a pass
}

// level is the waiting jobs of one priority, by submitter.
type level struct {
	priority int
	subs     map[string]*subQueue
	n        int
}

// PoolConfig tunes the pool.
type PoolConfig struct {
	// Grace bounds how long past its limit a job may hold its node (the
	// stop's grace period, collecting output, releasing). Backfill counts on
	// every job being gone by then.
	Grace time.Duration
	// MaxScan bounds the waiting jobs one pass looks at, so that a queue of
	// a hundred thousand jobs costs no more per decision than a short one.
	MaxScan int
	// RememberLost is how long a node whose lease lapsed still counts when
	// a job is judged on whether any node could ever hold it. Default:
	// DefaultRememberLost.
	RememberLost time.Duration
	// RememberEnded is how many of the jobs that ended last the pool
	// remembers (and how many cancels of jobs it has not seen): default
	// DefaultRememberEnded.
	RememberEnded int
}

// DefaultRememberEnded is how many ended jobs the pool remembers. Once a
// job is over, the events that may still come about it (a late cancel, the
// log's copy of what RENT appended and applied already) come within
// moments, and a job that runs after one that ended long ago has its
// outcome read from the log: a hundred thousand is ample and costs a few
// MiB, whatever the history.
const DefaultRememberEnded = 100_000

// DefaultRememberLost is how long a lost node (its lease lapsed) still
// counts for whether a newly queued job could ever be held. Run nodes come
// back after a crash, a reboot or an upgrade within minutes: a job submitted
// meanwhile that only such a node can hold waits for it rather than being
// rejected. Fifteen minutes covers a reboot of a large machine with room to
// spare; a node gone longer is taken to be gone for good, so that retiring
// one does not leave jobs that nothing else can run waiting for it.
//
// It bounds only that judgement, made once when a job first enters the
// queue. A job judged able to run waits however long its node is away, and
// a job held once and lost with its node is never judged again: a lost node
// is never the job's fault.
const DefaultRememberLost = 15 * time.Minute

// Pool is RENT's view of the world, built only from events: the nodes and
// what each has free, the jobs waiting in order and those held. It does no
// I/O; the Service feeds it events and publishes what it decides. It is not
// safe for concurrent use.
//
// The order in which waiting jobs are held: higher priority first; within a
// priority, the submitter holding the least cpu now (fair share), so one
// submitter's ten thousand jobs do not shut out another's one; then the
// order of submission. The first job in that order that does not fit gets a
// reservation: the node and time at which it will fit, known exactly
// because every held job declared its limit. Later jobs may start ahead of
// it (backfill) only where they cannot delay that reservation.
//
// Where a job may be held: a node whose free cpu, memory, gpu and disk
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
	nodes map[string]*node
	jobs  map[string]*job // blocked, waiting or held
	// over holds the jobs that ended most recently (RememberEnded of them,
	// oldest first in ended), so that a late or repeated event about one
	// changes nothing and a dependent learns its outcome at once. Older
	// ones are forgotten: the pool's heap is bounded by the jobs live, not
	// by every job there ever was. A dependent of a job forgotten is
	// blocked until the Service has read that job's outcome from the log
	// (Unresolved, Resolve).
	over  map[string]events.Outcome
	ended ring
	// unresolved holds the jobs that jobs run after that the pool does not
	// know, neither live nor recently ended: not accepted yet, or ended and
	// forgotten. The Service reads each one's outcome from the log.
	unresolved map[string]bool
	levels     map[int]*level
	nWait      int
	usage      map[string]int64  // milli-cpu held, by submitter
	after      map[string][]*job // dependents waiting for a job
	// early holds cancels seen before the job was submitted: by whom; the
	// oldest are forgotten past RememberEnded jobs (earlyOrder), since a
	// cancel of a job that ended long ago lands here too.
	early      map[string]*earlyCancel
	earlyOrder ring
	// liveEarly are who asked to cancel a live job before it was
	// submitted: the log has them before its submission, so a checkpoint
	// carries them while the job lives (Checkpoint). Few jobs have any: a
	// field of every job would take 32 bytes more of each queued one (its
	// size class).
	liveEarly map[string][]string
	// attention holds the jobs that may need a decision other than a hold:
	// a cancel, a rejection, or a first check that some node could hold
	// them. Decide looks at these only, so a long queue costs nothing here.
	attention map[string]*job
	// live caches the live nodes by name; nil when a node changed.
	live []*node
	// unchecked holds jobs queued while no node was live: once one
	// announces, they need the check whether any node could hold them.
	unchecked map[string]*job
	// outBytes is the size of the output a job returned (its last
	// attempt's), until it ends: what staging it takes on the node of a job
	// that reads it and was submitted before it was there to be sized.
	outBytes map[string]int64
	applied  uint64
	// freeBuf and usageBuf are holds' scratch, kept between calls: a
	// pass over a thousand nodes would otherwise allocate 32 KiB of them,
	// which the collector then pays for with every queued job's heap.
	freeBuf  []res
	usageBuf map[string]int64
	// sweeps are the sweeps' cancels it remembers (sweep.go).
	sweeps sweepCancels
}

// NewPool returns an empty pool that tells time with now (nil: time.Now).
func NewPool(cfg PoolConfig, now func() time.Time) *Pool {
	if cfg.Grace <= 0 {
		cfg.Grace = time.Minute
	}
	if cfg.MaxScan <= 0 {
		cfg.MaxScan = 2000
	}
	if cfg.RememberLost <= 0 {
		cfg.RememberLost = DefaultRememberLost
	}
	if cfg.RememberEnded <= 0 {
		cfg.RememberEnded = DefaultRememberEnded
	}
	if now == nil {
		now = time.Now
	}
	return &Pool{
		cfg: cfg, now: now,
		nodes: map[string]*node{}, jobs: map[string]*job{}, over: map[string]events.Outcome{}, unresolved: map[string]bool{},
		levels: map[int]*level{}, usage: map[string]int64{}, after: map[string][]*job{}, early: map[string]*earlyCancel{},
		liveEarly: map[string][]string{},
		attention: map[string]*job{}, unchecked: map[string]*job{}, outBytes: map[string]int64{},
	}
}

// Applied is the last sequence the pool has applied.
func (p *Pool) Applied() uint64 { return p.applied }

// Waiting is the number of jobs in the queue.
func (p *Pool) Waiting() int { return p.nWait }

// WaitingBySubmitter is the number of jobs in the queue of each submitter
// with any waiting.
func (p *Pool) WaitingBySubmitter() map[string]int {
	by := map[string]int{}
	for _, lv := range p.levels {
		for name, q := range lv.subs {
			if n := q.jobs.Len(); n > 0 {
				by[name] += n
			}
		}
	}
	return by
}

// Nodes is the number of nodes the pool knows, live or not.
func (p *Pool) Nodes() int { return len(p.nodes) }

// Leased lists, sorted, the nodes the pool counts live: those whose lease
// it has not seen lapse. RENT checks their leases, and records NodeExpired
// for one whose lease is gone.
func (p *Pool) Leased() []string {
	var names []string
	for name, n := range p.nodes {
		if !n.expired {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// LeasedBoot is the boot of node name if the pool counts it live: what a
// NodeExpired for it must name, so that a node that came back since is not
// taken for lost.
func (p *Pool) LeasedBoot(name string) (boot string, ok bool) {
	if n := p.nodes[name]; n != nil && !n.expired {
		return n.boot, true
	}
	return "", false
}

// Touch records that a message was stored at seq on job's subjects,
// whether or not it is an event the pool applies: a request, a deletion,
// or something that is no event at all, which anyone allowed to publish on
// the job's subjects may store. A decision is appended only while the
// job's last sequence is the one the pool knows (Decision.Expect): a
// message the pool had not counted would make every hold of the job
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
		n := p.node(e.Node)
		// A re-announced node keeps what is held on it: those holds end
		// through their own events.
		n.boot, n.expired, n.lostAt = e.Boot, false, time.Time{}
		n.cap = resOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes)
		n.containers = e.Labels[events.LabelContainers] == "true"
		// An announcement without isolation (a node older than it, or a
		// synthetic one) is taken as before: the node may hold jobs.
		n.unisolated = e.Isolation == events.IsolationNone && !e.AllowUnisolated
		p.live = nil
		for id, j := range p.unchecked {
			p.attention[id] = j
			delete(p.unchecked, id)
		}
		return
	case *events.NodeExpired:
		if n := p.nodes[e.Node]; n != nil && n.boot == e.Boot && !n.expired {
			n.expired, n.lostAt = true, p.timeOf(env)
			p.live = nil
		}
		return
	}
	if c, ok := events.SweepCancel(env.Event); ok {
		p.cancelSweep(SweepCancel{Sweep: strings.Clone(env.Subject), By: strings.Clone(c.By), Round: c.Round}) // sweep.go
		return
	}
	id := env.Subject
	if _, ended := p.over[id]; ended {
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
		if early := p.early[id]; early != nil {
			p.liveEarly[id] = early.by
			for _, by := range early.by {
				if events.MayCancel(by, e.Submitter) {
					j.cancel = true
					p.attention[id] = j
				}
			}
			delete(p.early, id)
		}
		p.cancelIfSwept(j) // sweep.go
		j.state = blocked
		for _, dep := range e.Spec.After {
			switch outcome, ended := p.over[dep]; {
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
			p.cancelEarly(strings.Clone(id), env.Seq, strings.Clone(e.By))
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
		n := p.node(e.Node)
		p.dequeue(j)
		j.state, j.attempt, j.node, j.heldAt = held, e.Attempt, e.Node, env.Time
		j.stopped, j.lost = false, false
		hold := resOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes)
		j.heldDisk = e.DiskBytes
		n.used = n.used.plus(hold)
		n.holds[j.id] = j
		p.usage[j.submitter] += hold.milliCPU
	case *events.RunStopped:
		if j != nil && j.state == held && e.Attempt == j.attempt {
			j.stopped = true
		}
	case *events.HoldLost:
		if j != nil && j.state == held && e.Attempt == j.attempt {
			j.lost = true
		}
	case *events.OutputReturned:
		if j != nil && e.Attempt == j.attempt {
			p.outBytes[id] = e.Bytes
		}
	case *events.ComputeReleased:
		if j == nil || j.state != held || e.Attempt != j.attempt {
			return
		}
		hold := resOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes)
		if n := p.nodes[j.node]; n != nil {
			n.used = n.used.minus(hold)
			delete(n.holds, j.id)
		}
		p.usage[j.submitter] -= hold.milliCPU
		if p.usage[j.submitter] == 0 {
			delete(p.usage, j.submitter)
		}
		j.node = ""
		if e.Final {
			p.end(id, e.Outcome, p.timeOf(env))
			return
		}
		// Held again after its node was lost (or its attempt otherwise
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

// inputBytes is what a job's staged inputs take on a node's disk, as far as
// its submission says. An input from a job that had not finished when it
// was submitted has no size there: it is added once that job succeeds (see
// end).
func inputBytes(data []events.DataRef) int64 {
	var n int64
	for _, d := range data {
		n += max(d.Bytes, 0)
	}
	return n
}

func (p *Pool) node(name string) *node {
	n := p.nodes[name]
	if n == nil {
		p.live = nil
		n = &node{name: name, holds: map[string]*job{}}
		p.nodes[name] = n
	}
	return n
}

// end forgets an ended job (keeping its outcome for the jobs that run after
// it) and lets its dependents go on, or rejects them. A dependent that
// stages its output counts that output's size on the node's disk from now.
func (p *Pool) end(id string, outcome events.Outcome, at time.Time) {
	if j := p.jobs[id]; j != nil {
		p.dequeue(j)
	}
	out := p.outBytes[id]
	delete(p.outBytes, id)
	delete(p.jobs, id)
	delete(p.early, id)
	delete(p.liveEarly, id)
	delete(p.attention, id)
	delete(p.unchecked, id)
	delete(p.unresolved, id)
	if _, ended := p.over[id]; !ended {
		// A copy: the event's id shares the block of headers it was read
		// with, which would stay as long as the id is remembered.
		id = strings.Clone(id)
		p.over = remember(&p.ended, p.over, id, p.cfg.RememberEnded)
	}
	// Not the outcome decoded: it is a slice of the decoder's buffer
	// (goccy/go-json hands out strings that share it), half a KiB or more,
	// which would stay as long as the job is remembered: for the
	// RememberEnded jobs, most of RENT's heap.
	outcome = kept(outcome)
	p.over[id] = outcome
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
	return len(p.jobs) + len(p.over) + len(p.early) + len(p.liveEarly) + len(p.unresolved) + len(p.after) + len(p.outBytes), len(p.jobs)
}

// Live reports whether the pool knows id as a job that has not ended.
func (p *Pool) Live(id string) bool { return p.jobs[id] != nil }

// ring is a bounded FIFO of job ids: the order in which the pool forgets.
type ring struct {
	ids  []string
	head int // the oldest, once full
}

// push adds id; once n are in, it takes out and returns the oldest.
func (r *ring) push(id string, n int) (old string, full bool) {
	if len(r.ids) < n {
		r.ids = append(r.ids, id)
		return "", false
	}
	old = r.ids[r.head]
	r.ids[r.head] = id
	r.head = (r.head + 1) % len(r.ids)
	return old, true
}

// earlyCancel is what the pool knows of the cancels of a job it has not
// seen submitted: the sequence of the first, and who sent them.
type earlyCancel struct {
	seq uint64
	by  []string
}

// cancelEarly records that by asked at seq (0: before the pool's
// checkpoint) to cancel id, a job the pool does not know. A job is asked
// to cancel 16 times at most: what comes after changes nothing.
func (p *Pool) cancelEarly(id string, seq uint64, by string) {
	early := p.early[id]
	if early == nil {
		early = &earlyCancel{seq: seq}
		p.early = remember(&p.earlyOrder, p.early, id, p.cfg.RememberEnded)
		p.early[id] = early
	}
	if len(early.by) < 16 && !slices.Contains(early.by, by) {
		early.by = append(early.by, by)
	}
}

// newestFirst yields r's ids, the newest first.
func (r *ring) newestFirst() iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := range len(r.ids) {
			if !yield(r.ids[(r.head-1-i+len(r.ids))%len(r.ids)]) {
				return
			}
		}
	}
}

// remember adds id to r, the order in which m's keys came, and deletes
// from m the oldest once n are in, returning m or, each time r comes round,
// a copy of it: a Go map keeps the room of what is deleted from it, and one
// that forgets as many keys as it learns grows to twice the size of what
// it holds (the pool's heap 1.4 times as large after 300,000 jobs ended as
// after 100,000). The copy costs one insertion for each key learnt. It is
// made key by key: maps.Clone copies the room as well.
func remember[V any](r *ring, m map[string]V, id string, n int) map[string]V {
	old, full := r.push(id, n)
	if !full {
		return m
	}
	delete(m, old)
	if r.head != 0 {
		return m
	}
	fresh := make(map[string]V, len(m)+1)
	for k, v := range m {
		fresh[k] = v
	}
	return fresh
}

// judge decides, once, when a job first enters the queue, whether any node
// could ever hold it: a node live now, or one lost no longer than
// RememberLost before, which is likely to come back. A job none of them
// could hold is rejected, unless it asked to wait for a node. The judgement
// is made from the log (the event that queued the job, and its time), so a
// rebuilt pool makes the same one; it is not made again when nodes are lost
// later, nor ever for a job held once. With no live node at all the job is
// not judged against an empty pool: it waits for the first node to announce
// itself, and Decide judges it then.
func (p *Pool) judge(j *job, at time.Time) {
	if j.attempt > 0 || j.state != waiting || j.spec.WaitForNode || j.cancel || j.rejection != "" {
		return
	}
	live := p.liveNodes()
	switch {
	case p.everFitsLive(j, live) || p.fitsLost(j, at):
	case len(live) == 0:
		p.unchecked[j.id] = j
	default:
		j.rejection = p.neverFits(j, live)
		p.attention[j.id] = j
	}
}

// neverFits says why no node in the pool can ever hold j.
func (p *Pool) neverFits(j *job, live []*node) string {
	if j.spec.Work.Image != "" && !p.anyContainers(live) {
		return "no node in the pool can ever hold it: it names an image and no node runs containers (set wait_for_node to wait for one)"
	}
	reason := fmt.Sprintf("no node in the pool can ever hold it: it needs %s and the largest node has %s (set wait_for_node to wait for a larger one)",
		p.describeNeed(j), describe(p.largest()))
	if note := p.unisolatedNote(j); note != "" {
		reason += "; " + note
	}
	return reason
}

// enqueue puts j in its submitter's queue at its priority, in submission
// order, so a job held again after its node was lost goes back ahead of
// later jobs.
func (p *Pool) enqueue(j *job) {
	lv := p.levels[j.spec.Priority]
	if lv == nil {
		lv = &level{priority: j.spec.Priority, subs: map[string]*subQueue{}}
		p.levels[j.spec.Priority] = lv
	}
	q := lv.subs[j.submitter]
	if q == nil {
		q = &subQueue{submitter: j.submitter, priority: j.spec.Priority, jobs: list.New()}
		lv.subs[j.submitter] = q
	}
	j.state, j.queue = waiting, q
	if j.cancel || j.rejection != "" {
		// Held, it left the attention of Decide; waiting, it needs it again.
		p.attention[j.id] = j
	}
	for e := q.jobs.Back(); e != nil; e = e.Prev() {
		if e.Value.(*job).order < j.order {
			j.elem = q.jobs.InsertAfter(j, e)
			lv.n++
			p.nWait++
			return
		}
	}
	j.elem = q.jobs.PushFront(j)
	lv.n++
	p.nWait++
}

func (p *Pool) dequeue(j *job) {
	if j.elem == nil {
		return
	}
	q := j.queue
	q.jobs.Remove(j.elem)
	j.elem, j.queue = nil, nil
	lv := p.levels[q.priority]
	lv.n--
	p.nWait--
	if q.jobs.Len() == 0 {
		delete(lv.subs, q.submitter)
	}
	if lv.n == 0 {
		delete(p.levels, q.priority)
	}
}

// Decision is an event the pool wants appended to a job's (or node's) log,
// valid only while Expect is still the job's last sequence.
type Decision struct {
	Job    string
	Event  events.Event
	Expect uint64
}

// reservation is where and when the first job that does not fit will.
type reservation struct {
	job   *job
	node  string
	at    time.Time
	extra res // what the node will have beyond the job's need at that time
}

// Decide returns what should happen now: rejections and cancellations of
// jobs that will never be held, holds lost with an expired node, then holds
// for waiting jobs in order, with backfill. At most max holds are returned.
func (p *Pool) Decide(max int) []Decision {
	now := p.now()
	var out []Decision
	for _, j := range p.sorted(p.attention) {
		switch {
		case j.state == held:
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
	for _, name := range p.expiredNodes() {
		n := p.nodes[name]
		for _, j := range p.sorted(n.holds) {
			if !j.lost && !j.stopped {
				out = append(out, Decision{Job: j.id, Expect: j.last, Event: &events.HoldLost{
					Hold:   p.holdOf(j),
					Reason: fmt.Sprintf("node %s stopped renewing its lease (boot %s): the attempt is lost with it", n.name, n.boot)}})
			}
		}
	}
	return append(out, p.holds(now, max)...)
}

// sorted lists jobs by submission order, so that decisions are repeatable.
func (p *Pool) sorted(m map[string]*job) []*job {
	out := make([]*job, 0, len(m))
	for _, j := range m {
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].order < out[b].order })
	return out
}

// expiredNodes lists the nodes whose lease lapsed and that still hold
// something, by name.
func (p *Pool) expiredNodes() []string {
	var out []string
	for name, n := range p.nodes {
		if n.expired && len(n.holds) > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// holdOf is j's current hold, as its ComputeHeld recorded it.
func (p *Pool) holdOf(j *job) events.Hold {
	r := j.spec.Request
	return events.Hold{Attempt: j.attempt, Node: j.node, CPU: r.CPU, MemoryBytes: r.MemoryBytes, GPU: r.GPU, DiskBytes: j.heldDisk}
}

// holds walks the waiting jobs in scheduling order and holds what fits.
//
// It costs the same whatever the queue's length: it looks at no more than
// MaxScan jobs, and skips a job that cannot fit anywhere now in constant
// time, by comparing it with the most any node has free (dimension by
// dimension, an upper bound). The reservation for the first job that does
// not fit is computed only once a later job could start ahead of it.
func (p *Pool) holds(now time.Time, max int) []Decision {
	live := p.liveNodes()
	if len(live) == 0 || p.nWait == 0 {
		return nil
	}
	if cap(p.freeBuf) < len(live) {
		p.freeBuf = make([]res, len(live))
	}
	free := p.freeBuf[:len(live)]
	var capBound res
	for i, n := range live {
		free[i] = n.cap.minus(n.used)
		capBound = upper(capBound, n.cap)
	}
	freeBound := bound(free)
	if p.usageBuf == nil {
		p.usageBuf = make(map[string]int64, len(p.usage))
	}
	usage := p.usageBuf
	clear(usage)
	for s, u := range p.usage {
		usage[s] = u
	}
	var out []Decision
	var blocked *job      // the first job in order that does not fit now
	var resv *reservation // where and when it will, once needed
	scanned := 0
	for _, prio := range p.priorities() {
		h := &subHeap{usage: usage}
		for _, q := range p.levels[prio].subs {
			h.push(cursor{q: q, e: q.jobs.Front()})
		}
		heap.Init(h)
		for h.Len() > 0 && len(out) < max && scanned < p.cfg.MaxScan {
			if freeBound.milliCPU <= 0 || freeBound.memory <= 0 {
				// The pool is full: no job can start, however deep the queue.
				return out
			}
			c := heap.Pop(h).(cursor)
			j := c.e.Value.(*job)
			scanned++
			if c.e = c.e.Next(); c.e != nil {
				heap.Push(h, c)
			}
			if j.cancel || j.rejection != "" || !j.need.fits(capBound) {
				continue
			}
			i := -1
			if j.need.fits(freeBound) {
				i = p.pick(live, free, j, now, nil)
				if i >= 0 && blocked != nil {
					// j would start ahead of an earlier job that waits: only
					// where that cannot delay it.
					if resv == nil {
						resv = p.reserve(blocked, live, free, now)
					}
					i = p.pick(live, free, j, now, resv)
				}
			}
			if i < 0 {
				if blocked == nil && p.everFitsLive(j, live) {
					blocked = j
				}
				continue
			}
			n := live[i]
			free[i] = free[i].minus(j.need)
			freeBound = bound(free)
			if resv != nil && n.name == resv.node && now.Add(j.limit+p.cfg.Grace).After(resv.at) {
				resv.extra = resv.extra.minus(j.need)
			}
			usage[j.submitter] += j.need.milliCPU
			h.fix(j.submitter)
			out = append(out, Decision{Job: j.id, Expect: j.last, Event: &events.ComputeHeld{
				// The disk held is request.disk and the staged inputs: both
				// are written to the node's disk.
				Hold: events.Hold{Attempt: j.attempt + 1, Node: n.name, CPU: j.spec.Request.CPU, MemoryBytes: j.spec.Request.MemoryBytes,
					GPU: j.spec.Request.GPU, DiskBytes: j.need.disk},
				Submitter: j.submitter,
				Spec:      j.spec,
			}})
		}
		if len(out) >= max || scanned >= p.cfg.MaxScan {
			break
		}
	}
	return out
}

// upper is the larger of a and b in every dimension.
func upper(a, b res) res {
	return res{max(a.milliCPU, b.milliCPU), max(a.memory, b.memory), max(a.gpu, b.gpu), max(a.disk, b.disk)}
}

// bound is the most any node has free, dimension by dimension.
func bound(free []res) res {
	var b res
	for _, f := range free {
		b = upper(b, f)
	}
	return b
}

// pick chooses the node for j now (an index into live), or -1 if none may
// hold it. With a reservation for an earlier job, j may only take what
// cannot delay it.
func (p *Pool) pick(live []*node, free []res, j *job, now time.Time, resv *reservation) int {
	best := -1
	for i, n := range live {
		f := free[i]
		if !j.need.fits(f) || !p.runs(n, j) {
			continue
		}
		if resv != nil && n.name == resv.node {
			endsBefore := !now.Add(j.limit + p.cfg.Grace).After(resv.at)
			if !endsBefore && !j.need.fits(resv.extra) {
				continue
			}
		}
		// The node with the most free cpu spreads work; by name among equals
		// (live is sorted), so that decisions are repeatable.
		if best < 0 || f.milliCPU > free[best].milliCPU {
			best = i
		}
	}
	return best
}

// reserve finds the node and time at which j will fit, counting on every
// held job to be gone by its limit plus grace, and on nothing else.
func (p *Pool) reserve(j *job, live []*node, free []res, now time.Time) *reservation {
	var best *reservation
	for i, n := range live {
		if !j.need.fits(n.cap) || !p.runs(n, j) {
			continue
		}
		type ending struct {
			at   time.Time
			give res
		}
		ends := make([]ending, 0, len(n.holds))
		for _, h := range n.holds {
			at := h.heldAt.Add(h.limit + p.cfg.Grace)
			if at.Before(now) {
				at = now
			}
			ends = append(ends, ending{at, h.need})
		}
		sort.Slice(ends, func(a, b int) bool { return ends[a].at.Before(ends[b].at) })
		have, at := free[i], now
		for _, e := range ends {
			if j.need.fits(have) {
				break
			}
			have, at = have.plus(e.give), e.at
		}
		if !j.need.fits(have) {
			continue
		}
		if best == nil || at.Before(best.at) {
			best = &reservation{job: j, node: n.name, at: at, extra: have.minus(j.need)}
		}
	}
	return best
}

func (p *Pool) priorities() []int {
	out := make([]int, 0, len(p.levels))
	for prio := range p.levels {
		out = append(out, prio)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(out)))
	return out
}

// liveNodes lists the nodes that may hold jobs, by name: not lost, and not
// running jobs unisolated without leave. The slice is shared: callers must
// not change it.
func (p *Pool) liveNodes() []*node {
	if p.live != nil {
		return p.live
	}
	out := []*node{}
	for _, n := range p.nodes {
		if !n.expired && !n.unisolated && n.cap.milliCPU > 0 {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	p.live = out
	return out
}

// runs reports whether n can run j at all: a job that names an image needs
// a node with a container engine.
func (p *Pool) runs(n *node, j *job) bool { return j.spec.Work.Image == "" || n.containers }

func (p *Pool) everFits(j *job) bool { return p.everFitsLive(j, p.liveNodes()) }

func (p *Pool) everFitsLive(j *job, live []*node) bool {
	for _, n := range live {
		if p.couldHold(n, j) {
			return true
		}
	}
	return false
}

// couldHold reports whether n, empty, could hold j.
func (p *Pool) couldHold(n *node, j *job) bool { return j.need.fits(n.cap) && p.runs(n, j) }

// fitsLost reports whether a node lost no longer than RememberLost before
// at could hold j.
func (p *Pool) fitsLost(j *job, at time.Time) bool {
	for _, n := range p.nodes {
		if n.expired && !n.unisolated && at.Sub(n.lostAt) < p.cfg.RememberLost && p.couldHold(n, j) {
			return true
		}
	}
	return false
}

// lostFor names the lost nodes that could hold j, however long ago they
// were lost, by name.
func (p *Pool) lostFor(j *job) []string {
	var out []string
	for _, n := range p.nodes {
		if n.expired && !n.unisolated && p.couldHold(n, j) {
			out = append(out, n.name)
		}
	}
	sort.Strings(out)
	return out
}

// unisolatedNote names the nodes that could hold j but run jobs without
// isolation, which their operators did not allow; "" if there are none.
func (p *Pool) unisolatedNote(j *job) string {
	var names []string
	for _, n := range p.nodes {
		if n.unisolated && !n.expired && (j == nil || p.couldHold(n, j)) {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return fmt.Sprintf("%s announce%s isolation none (jobs would see the node) and %s not started to allow it, so %s no jobs",
		strings.Join(names, ", "), plural(len(names), "s", ""), plural(len(names), "was", "were"), plural(len(names), "holds", "hold"))
}

// plural picks one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// cursor is a submitter's next job during a pass.
type cursor struct {
	q *subQueue
	e *list.Element
}

// subHeap orders submitters for fair share: least cpu held first, then the
// earliest next job.
type subHeap struct {
	items []cursor
	usage map[string]int64
}

func (h *subHeap) Len() int { return len(h.items) }
func (h *subHeap) Less(a, b int) bool {
	ua, ub := h.usage[h.items[a].q.submitter], h.usage[h.items[b].q.submitter]
	if ua != ub {
		return ua < ub
	}
	return h.items[a].e.Value.(*job).order < h.items[b].e.Value.(*job).order
}
func (h *subHeap) Swap(a, b int) { h.items[a], h.items[b] = h.items[b], h.items[a] }
func (h *subHeap) Push(x any)    { h.items = append(h.items, x.(cursor)) }
func (h *subHeap) push(c cursor) { h.items = append(h.items, c) }
func (h *subHeap) Pop() any {
	last := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return last
}

// Why explains where a job is, in words a person understands, to someone
// who may see the whole pool (the operator, the auditor).
func (p *Pool) Why(id string) wire.WhyReply { return p.why(id, false) }

// WhyFor is Why as user may be told it. A submitter is answered about its
// own jobs only (any other is "unknown", as a job that does not exist), and
// without the figures that count other tenants' work: its place in the
// queue, how many wait, what the busiest node has free.
func (p *Pool) WhyFor(id, user string, seesAll bool) wire.WhyReply {
	if seesAll {
		return p.Why(id)
	}
	if j := p.jobs[id]; j == nil || j.submitter != user {
		if _, ended := p.over[id]; ended || j != nil {
			r := p.why("", true)
			r.Job = id
			return r
		}
	}
	return p.why(id, true)
}

func (p *Pool) why(id string, redact bool) wire.WhyReply {
	r := wire.WhyReply{Job: id, Queued: p.nWait}
	if redact {
		r.Queued = 0
	}
	if outcome, ended := p.over[id]; ended {
		r.State = "over"
		r.Reason = "it ended: " + string(outcome)
		return r
	}
	j := p.jobs[id]
	if j == nil {
		r.State = "unknown"
		r.Reason = "the scheduler has not seen this job (not yet accepted, no such job, or it ended long ago)"
		return r
	}
	switch j.state {
	case held:
		r.State = hold.StateHeld
		r.Reason = "compute is held on " + j.node
		return r
	case blocked:
		r.State = hold.StateWaiting
		var deps []string
		for _, dep := range j.spec.After {
			if _, ended := p.over[dep]; ended {
				continue
			}
			state := "not yet accepted"
			if d := p.jobs[dep]; d != nil {
				state = [...]string{"waiting for its own dependencies", "waiting", "held"}[d.state]
			}
			deps = append(deps, dep+" ("+state+")")
		}
		r.Reason = fmt.Sprintf("waiting for %d job(s) it runs after to succeed: %s", len(deps), strings.Join(deps, ", "))
		if j.rejection != "" {
			r.Reason = "will be rejected: " + j.rejection
		}
		return r
	}
	r.State = hold.StateWaiting
	r.Position = p.position(j)
	switch {
	case j.cancel:
		r.Reason = "cancel requested; it will not be held"
	case j.rejection != "":
		r.Reason = "will be rejected: " + j.rejection
	case len(p.liveNodes()) == 0:
		r.Reason = p.noLiveNode(j)
	case !p.everFits(j):
		r.Reason = p.waitsForNode(j)
	case redact:
		// How many of other tenants' jobs are ahead, and how busy the
		// nodes are with them, are theirs to know.
		r.Position = 0
		r.Reason = fmt.Sprintf("waiting for compute: it needs %s; waiting jobs are held by priority (its is %d), then fair share between submitters, then submission order", describe(j.need), j.spec.Priority)
	case r.Position == 1:
		r.Reason = fmt.Sprintf("next in line: needs %s; the node with the most free has %s (%s in all)", describe(j.need), describe(p.mostFree()), describe(p.total()))
	default:
		r.Reason = fmt.Sprintf("position %d of %d in the queue (priority %d, then fair share between submitters, then submission order); it needs %s", r.Position, p.nWait, j.spec.Priority, describe(j.need))
	}
	return r
}

// noLiveNode says why a job waits in a pool with no node that may hold it.
func (p *Pool) noLiveNode(j *job) string {
	reason := "no compute node has joined the pool yet"
	if lost := p.lostFor(j); len(lost) > 0 {
		reason = fmt.Sprintf("no node in the pool is live: it waits for %s, lost (its lease lapsed), to announce itself again", strings.Join(lost, ", "))
	}
	if note := p.unisolatedNote(nil); note != "" {
		reason += "; " + note
	}
	return reason
}

// waitsForNode says why a job that no live node can hold waits.
func (p *Pool) waitsForNode(j *job) string {
	reason := fmt.Sprintf("needs %s; the largest node has %s: no node in the pool can hold it now", p.describeNeed(j), describe(p.largest()))
	lost := p.lostFor(j)
	switch {
	case len(lost) > 0:
		reason += fmt.Sprintf(", and it waits for %s, lost (its lease lapsed), to announce itself again or for a node as large to join", strings.Join(lost, ", "))
	case j.attempt > 0:
		reason += ", and it waits for one that can to join"
	default:
		reason += ", and it waits for one to join (wait_for_node)"
	}
	if j.attempt > 0 {
		reason += fmt.Sprintf("; it was held before (attempt %d) and a lost node is never the job's fault: it is not rejected for it", j.attempt)
	}
	if note := p.unisolatedNote(j); note != "" {
		reason += "; " + note
	}
	return reason
}

// position is j's place in the order holds are made, counting jobs of higher
// priority and, in its own priority, jobs ahead of it in submission order
// (an estimate: fair share may move it).
func (p *Pool) position(j *job) int {
	pos := 1
	for prio, lv := range p.levels {
		if prio > j.spec.Priority {
			pos += lv.n
		}
	}
	if lv := p.levels[j.spec.Priority]; lv != nil {
		for _, q := range lv.subs {
			for e := q.jobs.Front(); e != nil && e.Value.(*job).order < j.order; e = e.Next() {
				pos++
			}
		}
	}
	return pos
}

func (p *Pool) anyContainers(live []*node) bool {
	for _, n := range live {
		if n.containers {
			return true
		}
	}
	return false
}

func (p *Pool) largest() res {
	var best res
	for _, n := range p.liveNodes() {
		if n.cap.milliCPU > best.milliCPU || (n.cap.milliCPU == best.milliCPU && n.cap.memory > best.memory) {
			best = n.cap
		}
	}
	return best
}

func (p *Pool) mostFree() res {
	var best res
	for _, n := range p.liveNodes() {
		f := n.cap.minus(n.used)
		if f.milliCPU > best.milliCPU || (f.milliCPU == best.milliCPU && f.memory > best.memory) {
			best = f
		}
	}
	return best
}

func (p *Pool) total() res {
	var t res
	for _, n := range p.liveNodes() {
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
	if r.disk > 0 {
		parts = append(parts, humanBytes(r.disk)+" disk")
	}
	return strings.Join(parts, ", ")
}

// describeNeed is describe of what j needs, saying what of its disk is its
// staged inputs.
func (p *Pool) describeNeed(j *job) string {
	d := describe(j.need)
	if inputs := j.need.disk - j.spec.Request.DiskBytes; inputs > 0 {
		d += fmt.Sprintf(" (request.disk %s and %s of staged inputs)", humanBytes(j.spec.Request.DiskBytes), humanBytes(inputs))
	}
	return d
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

// fix restores the heap's order after a submitter's usage grew.
func (h *subHeap) fix(submitter string) {
	for i := range h.items {
		if h.items[i].q.submitter == submitter {
			heap.Fix(h, i)
			return
		}
	}
}
