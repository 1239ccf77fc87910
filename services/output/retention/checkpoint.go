package retention

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// Checkpoint is where the projection can be rebuilt from without reading
// the whole log: a Refs that reads every message from From on holds what
// the one it was taken from held, and counts every root as it did. The
// jobs it keeps started at From or after. Every job that started before
// and is not kept is over and holds nothing (Forget): its later events
// change nothing, here or there.
//
// A checkpoint stays true as the log grows: a job kept later was kept
// then, or started after. OUTPUT writes one to its bucket as it goes
// (events.OutputBucket), and one that is missing or unreadable only means
// reading the whole log. What a restart reads is the jobs within their
// retention (7 days by default) and a day past their last deletion, not
// every job there ever was; a job whose retention is a year holds the
// checkpoint back a year.
type Checkpoint struct {
	// Mark is the log the checkpoint is of, the last sequence the
	// projection had applied, and From: the first sequence the projection
	// needs, the least first event of the jobs it keeps; the one after
	// Applied when it keeps none.
	bus.Mark
}

// Checkpoint is where r can be rebuilt from, as of now. Only a Refs that
// forgets (Forget) has one that is not the log's first event.
func (r *Refs) Checkpoint() Checkpoint {
	c := Checkpoint{Mark: bus.Mark{From: r.applied + 1, Applied: r.applied}}
	for _, h := range r.jobs {
		c.From = min(c.From, max(h.first, 1))
	}
	if !r.forget {
		c.From = 1
	}
	return c
}

// Restore makes an empty r stand as one that applied the log up to
// c.From-1: it reads from c.From on.
func (r *Refs) Restore(c Checkpoint) {
	r.applied = max(r.applied, c.From-1)
}

// restore starts the projection from the checkpoint in kv when there is
// one of this log, and makes the tail read from its From. It returns From
// (1 when the projection is made from the whole log) and when the log was
// made, which the checkpoints it writes say.
func (s *Service) restore(ctx context.Context, kv jetstream.KeyValue) (from uint64, made time.Time, err error) {
	var c Checkpoint
	ok, made, err := bus.LoadCheckpoint(ctx, s.js, kv, events.OutputCheckpointKey, &c, s.log, "retention's projection")
	if err != nil || !ok {
		return 1, made, err
	}
	s.mu.Lock()
	s.refs.Restore(c)
	s.mu.Unlock()
	s.tail.StartAt(c.From)
	return c.From, made, nil
}

// checkpoints writes the projection's checkpoint to kv every
// bus.CheckpointEvery, and once more when ctx ends (bus.KeepCheckpoint).
// Every instance writes its own: each is true (see Checkpoint).
func (s *Service) checkpoints(ctx context.Context, kv jetstream.KeyValue, log time.Time) {
	bus.KeepCheckpoint(ctx, kv, events.OutputCheckpointKey, bus.CheckpointEvery, nil, func() any {
		s.mu.Lock()
		c := s.refs.Checkpoint()
		s.mu.Unlock()
		c.Log = log
		return c
	}, s.log)
}
