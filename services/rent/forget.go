package rent

import (
	"iter"
	"slices"
)

// recent is a map that keeps only its n newest keys: what the pool
// remembers of jobs that are over (their outcome) and of cancels of jobs it
// has not seen, so that its heap is bounded by the jobs live, not by every
// job there ever was.
type recent[V any] struct {
	m     map[string]V
	order ring // the order in which m's keys came
	n     int
}

func newRecent[V any](n int) recent[V] { return recent[V]{m: map[string]V{}, n: n} }

func (r *recent[V]) get(id string) (V, bool) {
	v, ok := r.m[id]
	return v, ok
}

func (r *recent[V]) has(id string) bool {
	_, ok := r.m[id]
	return ok
}

// put sets id's value; a new id forgets the oldest once n are in.
func (r *recent[V]) put(id string, v V) {
	if _, ok := r.m[id]; !ok {
		r.m = remember(&r.order, r.m, id, r.n)
	}
	r.m[id] = v
}

// delete forgets id now. Its place in the order stays: coming round, it
// deletes the id again, whether or not it came back since.
func (r *recent[V]) delete(id string) { delete(r.m, id) }

func (r *recent[V]) len() int { return len(r.m) }

// newestFirst yields the ids in the order they came, the newest first,
// deleted ones too.
func (r *recent[V]) newestFirst() iter.Seq[string] { return r.order.newestFirst() }

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

// earlyCancel is what the pool knows of the cancels of a job it has not
// seen submitted: the sequence of the first, and who sent them.
type earlyCancel struct {
	seq uint64
	by  []string
}

// earlyCancels are the cancels that came before their job's submission.
// Those of jobs not submitted are kept as long as the ended jobs are (a
// cancel of a job that ended long ago lands here too), the oldest
// forgotten first.
type earlyCancels struct {
	unseen recent[*earlyCancel]
	// live are who asked to cancel a live job before it was submitted: the
	// log has them before its submission, so a checkpoint carries them
	// while the job lives (Pool.Checkpoint). Few jobs have any: a field of
	// every job would take 32 bytes more of each queued one (its size
	// class).
	live map[string][]string
}

func newEarlyCancels(n int) earlyCancels {
	return earlyCancels{unseen: newRecent[*earlyCancel](n), live: map[string][]string{}}
}

// add records that by asked at seq (0: before the pool's checkpoint) to
// cancel id, a job the pool does not know. A job is asked to cancel 16
// times at most: what comes after changes nothing.
func (c *earlyCancels) add(id string, seq uint64, by string) {
	early, ok := c.unseen.get(id)
	if !ok {
		early = &earlyCancel{seq: seq}
		c.unseen.put(id, early)
	}
	if len(early.by) < 16 && !slices.Contains(early.by, by) {
		early.by = append(early.by, by)
	}
}

// submitted says that id was submitted: it returns who asked to cancel it
// before, and keeps them while it lives.
func (c *earlyCancels) submitted(id string) []string {
	early, ok := c.unseen.get(id)
	if !ok {
		return nil
	}
	c.live[id] = early.by
	c.unseen.delete(id)
	return early.by
}

// ended forgets the cancels of id, which ended.
func (c *earlyCancels) ended(id string) {
	c.unseen.delete(id)
	delete(c.live, id)
}

func (c *earlyCancels) len() int { return c.unseen.len() + len(c.live) }
