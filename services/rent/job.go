package rent

import (
	"container/list"
	"sort"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// jobState is where a live job is in RENT: it ends when its job does, and
// the pool forgets the job (see recent).
type jobState int

const (
	blocked jobState = iota // waiting for the jobs it runs after
	waiting                 // in the queue
	placed                  // its ComputeHeld is applied: compute is held for it on a node
)

// String is the state as Why words it, in the public words of a job's
// status: a placed job's status is "held".
func (s jobState) String() string {
	switch s {
	case blocked:
		return "waiting for its own dependencies"
	case waiting:
		return "waiting"
	case placed:
		return "held"
	}
	return "unknown"
}

// job is what the pool knows of a live job: its request, its place in the
// queue or its node, and what is still to be decided of it.
type job struct {
	id        string
	order     uint64 // sequence of JobSubmitted: the place in the queue
	last      uint64 // the job's last event: what a decision expects
	submitter string
	spec      events.JobSpec
	// need is what placing it takes: its request, and on the node's disk
	// its staged inputs beside request.disk.
	need      res
	heldDisk  int64 // the disk its current placement took, as ComputeHeld says
	limit     time.Duration
	attempt   int // the last attempt placed; 0 before the first
	state     jobState
	node      string
	heldAt    time.Time
	stopped   bool  // the current attempt's RunStopped is logged
	lost      bool  // HoldLost is logged for the current attempt
	cancel    bool  // a cancel was requested
	expired   bool  // HoldExpired is logged for the current attempt
	due       int32 // its place in the meter's heap, plus one; 0 when not there
	pending   int   // jobs of After not yet succeeded
	rejection string
	elem      *list.Element
	queue     *subQueue
}

// heldAs is j's current attempt, placed on n, as its ComputeHeld recorded
// it: what a HoldLost of it names.
func (j *job) heldAs(n *node) events.Hold {
	r := j.spec.Request
	var gpus []string
	if n != nil {
		gpus = n.devs.of(j.id)
	}
	return events.Hold{Attempt: j.attempt, Node: j.node, CPU: r.CPU, MemoryBytes: r.MemoryBytes, GPU: r.GPU, DiskBytes: j.heldDisk, GPUs: gpus}
}

// inputBytes is what a job's staged inputs take on a node's disk, as far as
// its submission says. An input from a job that had not finished when it
// was submitted has no size there: it is added once that job succeeds (see
// Pool.end).
func inputBytes(data []events.DataRef) int64 {
	var n int64
	for _, d := range data {
		n += max(d.Bytes, 0)
	}
	return n
}

// byOrder lists jobs by submission order, so that decisions are repeatable.
func byOrder(m map[string]*job) []*job {
	out := make([]*job, 0, len(m))
	for _, j := range m {
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].order < out[b].order })
	return out
}
