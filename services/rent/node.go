package rent

import (
	"sort"
	"time"
)

// node is a run node as the log describes it: what it announced, the jobs
// placed on it, and whether its lease still stands.
type node struct {
	name string
	boot string
	cap  res
	used res
	// devs are its GPUs by UUID, when it announced them (nil when it
	// announced a count alone): then its free GPUs are those of devs.
	devs *devices
	// containers says the node runs jobs that name an image.
	containers bool
	expired    bool // its lease lapsed: nothing new is placed on it until it announces again
	// lostAt is when its lease lapsed (the time of NodeExpired), while
	// expired: for how long it still counts as a node that could hold a job.
	lostAt time.Time
	// unisolated says it announced isolation none without its operator's
	// leave to run jobs so: nothing is placed on it, and it counts for
	// nothing.
	unisolated bool
	// card is what the pool made of its card (card.go); "" for nothing.
	card string
	// jobs are the jobs placed on it: their ComputeHeld applied, their
	// ComputeReleased not yet.
	jobs map[string]*job
}

// free is what n has free now: its GPUs counted by device where it
// announced them, so that a withdrawn device is not free.
func (n *node) free() res {
	f := n.cap.minus(n.used)
	if n.devs != nil {
		f.gpu = n.devs.free()
	}
	return f
}

// runs reports whether n can run j at all: a job that names an image needs
// a node with a container engine.
func (n *node) runs(j *job) bool { return j.spec.Work.Image == "" || n.containers }

// couldHold reports whether n, empty, could hold j.
func (n *node) couldHold(j *job) bool { return j.need.fits(n.cap) && n.runs(j) }

// nodeSet is every node the log has named, live or lost, by name.
type nodeSet struct {
	all map[string]*node
	// live caches the live nodes by name; nil when a node changed.
	live []*node
}

// get returns the node name, known from now on if it was not.
func (ns *nodeSet) get(name string) *node {
	n := ns.all[name]
	if n == nil {
		ns.live = nil
		n = &node{name: name, jobs: map[string]*job{}}
		ns.all[name] = n
	}
	return n
}

// changed says that a node's lease or announcement changed: it may have
// joined the live nodes or left them.
func (ns *nodeSet) changed() { ns.live = nil }

// liveNodes lists the nodes that may hold jobs, by name: not lost, and not
// running jobs unisolated without leave. The slice is shared: callers must
// not change it.
func (ns *nodeSet) liveNodes() []*node {
	if ns.live != nil {
		return ns.live
	}
	out := []*node{}
	for _, n := range ns.all {
		if !n.expired && !n.unisolated && n.cap.milliCPU > 0 {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	ns.live = out
	return out
}

// leased lists, sorted, the nodes whose lease has not been seen to lapse.
func (ns *nodeSet) leased() []string {
	var names []string
	for name, n := range ns.all {
		if !n.expired {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// expiredWithJobs lists the nodes whose lease lapsed and that still have
// jobs placed on them, by name.
func (ns *nodeSet) expiredWithJobs() []*node {
	var out []*node
	for _, n := range ns.all {
		if n.expired && len(n.jobs) > 0 {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return out
}

// lostCouldHold reports whether a node lost less than within before at
// could hold j.
func (ns *nodeSet) lostCouldHold(j *job, at time.Time, within time.Duration) bool {
	for _, n := range ns.all {
		if n.expired && !n.unisolated && at.Sub(n.lostAt) < within && n.couldHold(j) {
			return true
		}
	}
	return false
}

// lostFor names the lost nodes that could hold j, however long ago they
// were lost, by name.
func (ns *nodeSet) lostFor(j *job) []string {
	var out []string
	for _, n := range ns.all {
		if n.expired && !n.unisolated && n.couldHold(j) {
			out = append(out, n.name)
		}
	}
	sort.Strings(out)
	return out
}

// unisolatedFor names, sorted, the leased nodes that could hold j (any
// job, if j is nil) but run jobs without isolation, which their operators
// did not allow.
func (ns *nodeSet) unisolatedFor(j *job) []string {
	var names []string
	for _, n := range ns.all {
		if n.unisolated && !n.expired && (j == nil || n.couldHold(j)) {
			names = append(names, n.name)
		}
	}
	sort.Strings(names)
	return names
}
