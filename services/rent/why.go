package rent

import (
	"fmt"
	"strings"

	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
)

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
		if ended := p.over.has(id); ended || j != nil {
			r := p.why("", true)
			r.Job = id
			return r
		}
	}
	return p.why(id, true)
}

func (p *Pool) why(id string, redact bool) wire.WhyReply {
	r := wire.WhyReply{Job: id, Queued: p.queue.len()}
	if redact {
		r.Queued = 0
	}
	if outcome, ended := p.over.get(id); ended {
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
	case placed:
		r.State = hold.StateHeld
		r.Reason = "compute is held on " + j.node
		return r
	case blocked:
		r.State = hold.StateWaiting
		var deps []string
		for _, dep := range j.spec.After {
			if p.over.has(dep) {
				continue
			}
			state := "not yet accepted"
			if d := p.jobs[dep]; d != nil {
				state = d.state.String()
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
	r.Position = p.queue.position(j)
	live := p.nodes.liveNodes()
	switch {
	case j.cancel:
		r.Reason = "cancel requested; it will not be held"
	case j.rejection != "":
		r.Reason = "will be rejected: " + j.rejection
	case len(live) == 0:
		r.Reason = noLiveNode(&p.nodes, j)
	case !anyCouldHold(live, j):
		r.Reason = waitsForNode(&p.nodes, j)
	case gpuWait(live, j, redact) != "":
		r.Reason = gpuWait(live, j, redact)
	case redact:
		// How many of other tenants' jobs are ahead, and how busy the
		// nodes are with them, are theirs to know.
		r.Position = 0
		r.Reason = fmt.Sprintf("waiting for compute: it needs %s; waiting jobs are held by priority (its is %d), then fair share between submitters, then submission order", describe(j.need), j.spec.Priority)
	case r.Position == 1:
		r.Reason = fmt.Sprintf("next in line: needs %s; the node with the most free has %s (%s in all)", describe(j.need), describe(mostFree(live)), describe(total(live)))
	default:
		r.Reason = fmt.Sprintf("position %d of %d in the queue (priority %d, then fair share between submitters, then submission order); it needs %s", r.Position, p.queue.len(), j.spec.Priority, describe(j.need))
	}
	return r
}

// noLiveNode says why a job waits in a pool with no node that may hold it.
func noLiveNode(ns *nodeSet, j *job) string {
	reason := "no compute node has joined the pool yet"
	if lost := ns.lostFor(j); len(lost) > 0 {
		reason = fmt.Sprintf("no node in the pool is live: it waits for %s, lost (its lease lapsed), to announce itself again", strings.Join(lost, ", "))
	}
	if note := unisolatedNote(ns, nil); note != "" {
		reason += "; " + note
	}
	if note := ns.uncardedNote(); note != "" {
		reason += "; " + note
	}
	return reason
}

// waitsForNode says why a job that no live node can hold waits.
func waitsForNode(ns *nodeSet, j *job) string {
	reason := fmt.Sprintf("needs %s; the largest node has %s: no node in the pool can hold it now", describeNeed(j), describe(largest(ns.liveNodes())))
	lost := ns.lostFor(j)
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
	if note := unisolatedNote(ns, j); note != "" {
		reason += "; " + note
	}
	return reason
}

// neverFits says why no node in the pool can ever hold j; live are the
// live nodes.
func neverFits(ns *nodeSet, j *job, live []*node) string {
	if j.spec.Work.Image != "" && !anyContainers(live) {
		return "no node in the pool can ever hold it: it names an image and no node runs containers (set wait_for_node to wait for one)"
	}
	reason := fmt.Sprintf("no node in the pool can ever hold it: it needs %s and the largest node has %s (set wait_for_node to wait for a larger one)",
		describeNeed(j), describe(largest(live)))
	if note := unisolatedNote(ns, j); note != "" {
		reason += "; " + note
	}
	return reason
}

// unisolatedNote names the nodes that could hold j but run jobs without
// isolation, which their operators did not allow; "" if there are none.
func unisolatedNote(ns *nodeSet, j *job) string {
	names := ns.unisolatedFor(j)
	if len(names) == 0 {
		return ""
	}
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

func anyContainers(live []*node) bool {
	for _, n := range live {
		if n.containers {
			return true
		}
	}
	return false
}

// largest is the largest of live: most cpu, then most memory.
func largest(live []*node) res {
	var best res
	for _, n := range live {
		if n.cap.milliCPU > best.milliCPU || (n.cap.milliCPU == best.milliCPU && n.cap.memory > best.memory) {
			best = n.cap
		}
	}
	return best
}

// mostFree is what the node of live with the most free has free: most
// cpu, then most memory.
func mostFree(live []*node) res {
	var best res
	for _, n := range live {
		f := n.free()
		if f.milliCPU > best.milliCPU || (f.milliCPU == best.milliCPU && f.memory > best.memory) {
			best = f
		}
	}
	return best
}

// total is what live have in all.
func total(live []*node) res {
	var t res
	for _, n := range live {
		t = t.plus(n.cap)
	}
	return t
}

func describe(r res) string {
	parts := []string{
		fmt.Sprintf("%g cpu", float64(r.milliCPU)/1000),
		hold.HumanBytes(r.memory) + " memory",
	}
	if r.gpu > 0 {
		parts = append(parts, fmt.Sprintf("%d gpu", r.gpu))
	}
	if r.disk > 0 {
		parts = append(parts, hold.HumanBytes(r.disk)+" disk")
	}
	return strings.Join(parts, ", ")
}

// describeNeed is describe of what j needs, saying what of its disk is its
// staged inputs.
func describeNeed(j *job) string {
	d := describe(j.need)
	if inputs := j.need.disk - j.spec.Request.DiskBytes; inputs > 0 {
		d += fmt.Sprintf(" (request.disk %s and %s of staged inputs)", hold.HumanBytes(j.spec.Request.DiskBytes), hold.HumanBytes(inputs))
	}
	return d
}
