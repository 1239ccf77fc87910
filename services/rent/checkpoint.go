package rent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// Checkpoint is where a pool can be rebuilt from without reading the whole
// log: the pool that reads the node events before From, is given Early,
// and reads every message from From on, knows every live job and node as
// the pool it was taken from did, and decides as it would. Jobs that ended
// before From are not known to it; one that a job runs after is read from
// the log when needed (Unresolved), as one forgotten is.
//
// A checkpoint stays true as the log grows: the jobs live later were live
// then, and so since From, or were submitted after it. RENT writes one to
// its bucket as it goes (events.RentBucket), and one that is missing or
// unreadable only means reading the whole log.
type Checkpoint struct {
	// Mark is the log the checkpoint is of, the last sequence the pool
	// had applied, and From: the first sequence the pool needs of a job,
	// the oldest live job's submission; the one after Applied when no job
	// is live.
	bus.Mark
	// Early are the cancels that came before their job's submission,
	// which the log holds before From: of the live jobs, and of jobs not
	// submitted yet (or never to be), newest last.
	Early []EarlyCancel `json:"early,omitempty"`
	// Sweeps are the cancels of whole sweeps the pool remembers, oldest
	// first: a member submitted after one is cancelled on submission
	// (sweep.go).
	Sweeps []SweepCancel `json:"sweeps,omitempty"`
}

// EarlyCancel is who asked to cancel a job before it was submitted.
type EarlyCancel struct {
	Job string   `json:"job"`
	By  []string `json:"by"`
}

// maxEarly bounds the early cancels a checkpoint keeps, the newest: its
// entry must fit one message. More than a few are cancels of jobs that
// ended long ago, or of none, which change nothing.
const maxEarly = 4096

// Checkpoint is where the pool can be rebuilt from, as of now, given that
// it read everything of the log up to read. The pool may have applied
// later events (its own decisions, applied as soon as stored), and not
// the ones stored between: From is never past read+1.
func (p *Pool) Checkpoint(read uint64) Checkpoint {
	c := Checkpoint{Mark: bus.Mark{From: min(p.applied, read) + 1, Applied: p.applied}}
	for _, j := range p.jobs {
		c.From = min(c.From, j.order)
		// A live job's cancel decided nothing yet, or it would not be
		// live; its submission is read again, and finds the cancel
		// waiting.
		if by := p.early.live[j.id]; len(by) > 0 && len(c.Early) < maxEarly {
			c.Early = append(c.Early, EarlyCancel{Job: j.id, By: by})
		}
	}
	slices.SortFunc(c.Early, func(a, b EarlyCancel) int { return strings.Compare(a.Job, b.Job) })
	var waiting []EarlyCancel // newest first
	for id := range p.early.unseen.newestFirst() {
		if len(c.Early)+len(waiting) == maxEarly {
			break
		}
		if early, ok := p.early.unseen.get(id); ok && early.seq < c.From {
			waiting = append(waiting, EarlyCancel{Job: id, By: early.by})
		}
	}
	slices.Reverse(waiting)
	c.Early = append(c.Early, waiting...)
	c.Sweeps = p.sweeps.list()
	return c
}

// Restore gives an empty pool what c holds that the log after c.From does
// not: the early cancels, and the sweeps' cancels. The pool then stands as one that applied the log
// up to c.From-1: its next checkpoint starts no earlier than c.
func (p *Pool) Restore(c Checkpoint) {
	for _, e := range c.Early {
		for _, by := range e.By {
			p.early.add(e.Job, 0, by)
		}
	}
	for _, sc := range c.Sweeps {
		p.sweeps.add(sc)
	}
	cancelSwept(maps.Values(p.jobs), &p.sweeps, p.attention)
	p.applied = max(p.applied, c.From-1)
}

// restore starts the pool from the checkpoint in kv when there is one of
// this log: it applies the node events stored before its From, gives the
// pool its early cancels, and makes the tail read from From. It returns
// From, 1 when the pool is to be made from the whole log, and when the log
// was made, which the checkpoints it writes say.
func (s *Service) restore(ctx context.Context, kv jetstream.KeyValue) (from uint64, made time.Time, err error) {
	var c Checkpoint
	ok, made, err := bus.LoadCheckpoint(ctx, s.js, kv, events.RentCheckpointKey, &c, s.log, "the pool")
	if err != nil || !ok {
		return 1, made, err
	}
	if err := s.nodesBefore(ctx, c.From); err != nil {
		return 0, time.Time{}, err
	}
	s.mu.Lock()
	s.pool.Restore(c)
	s.mu.Unlock()
	s.tail.StartAt(c.From)
	return c.From, made, nil
}

// nodesBefore applies the node events stored before from. They are read
// on a consumer, which the stream's leader serves, not with direct gets,
// which a replica catching up may answer (nats-server lets one that is 90%
// there): an announcement it does not have yet would be read by no one,
// and the node never used.
func (s *Service) nodesBefore(ctx context.Context, from uint64) error {
	f, err := bus.Follow(ctx, s.js, []string{events.NodeSubjects}, 1)
	if err != nil {
		return fmt.Errorf("read the node events before #%d: %w", from, err)
	}
	defer f.Stop()
	for more := f.Pending() > 0; more; {
		m, pending, err := f.Next()
		if err != nil {
			return fmt.Errorf("read the node events before #%d: %w", from, err)
		}
		if m.Sequence >= from {
			break
		}
		more = pending > 0
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			continue // as the tail skips it
		}
		env.Seq = m.Sequence
		s.mu.Lock()
		s.pool.Apply(env)
		s.mu.Unlock()
	}
	return nil
}

// checkpoints writes the pool's checkpoint to kv every bus.CheckpointEvery
// while this instance leads, and once more when ctx ends, whether it leads
// or not (bus.KeepCheckpoint).
func (s *Service) checkpoints(ctx context.Context, kv jetstream.KeyValue, log time.Time) {
	bus.KeepCheckpoint(ctx, kv, events.RentCheckpointKey, bus.CheckpointEvery, s.leading, func() any {
		s.mu.Lock()
		c := s.pool.Checkpoint(s.tail.Applied())
		s.mu.Unlock()
		c.Log = log
		return c
	}, s.log)
}
