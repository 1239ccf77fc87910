package gate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// hold is one attempt as the gate knows it from the log: where it is held,
// whether its hold is over, and what of its submitter's store it may read.
// Its fields are guarded by mu.
type hold struct {
	mu        sync.Mutex
	job       string
	attempt   int
	node      string // where it was held; "" if it never was
	submitter string
	data      []events.DataRef
	last      uint64    // the job's last message read
	looked    time.Time // when the log was last asked about the job
	over      string    // why the hold is over; "" while it is held
	// reads are the objects the attempt may read, once known: those its
	// staged data is stored in, and its job's last checkpoint saved by an
	// earlier attempt (resume), which it restores.
	reads map[string]bool
	// saves tells which checkpoint saves count; resume is the manifest of
	// the last that does of an attempt before this one.
	saves  events.Saves
	resume string
}

// fold takes what the job's log says after h.last.
func (h *hold) fold(hist bus.History) {
	for _, e := range hist.Events {
		if h.saves.Accept(e.Event) {
			if c := e.Event.(*events.CheckpointSaved); c.Attempt < h.attempt {
				h.resume = c.Manifest
			}
		}
		switch ev := e.Event.(type) {
		case *events.ComputeHeld:
			switch {
			case ev.Attempt == h.attempt && h.node == "":
				h.node, h.submitter, h.data = ev.Node, ev.Submitter, ev.Spec.Data
			case ev.Attempt > h.attempt && h.over == "":
				h.over = "the job was held again"
			}
		case *events.RunStopped:
			// The node's own stop ends its hold; another node's is
			// set aside, as everywhere.
			if ev.Attempt == h.attempt && events.FromHolder(ev, h.node) && h.over == "" {
				h.over = "the attempt stopped"
			}
		case *events.HoldLost:
			if ev.Attempt == h.attempt && h.over == "" {
				h.over = "the attempt was lost with its node"
			}
		case *events.ComputeReleased:
			if ev.Attempt == h.attempt && h.over == "" {
				h.over = "the attempt's compute was released"
			}
		}
		if events.Terminal(e.Event) && h.over == "" {
			h.over = "the job is over"
		}
	}
	h.last = max(h.last, hist.Last)
}

// refuses reports whether h, with hist folded in, would not be held on
// node: the gate then asks the leader before it refuses.
func (h *hold) refuses(hist bus.History, node string) bool {
	for _, e := range hist.Events {
		if held, ok := e.Event.(*events.ComputeHeld); ok && held.Attempt == h.attempt && h.node == "" {
			return held.Node != node
		}
	}
	return h.node != node
}

// holds are the attempts the gate was asked about lately. Their number is
// bounded: one the gate forgot is read again from the log.
type holds struct {
	mu sync.Mutex
	m  map[holdKey]*hold
}

type holdKey struct {
	job     string
	attempt int
}

// recheck is how long what the log said of a hold answers the requests
// that follow, if the gate hears of nothing published about the job
// meanwhile (stale): a bound on what a missed publication costs.
const recheck = time.Second

// stale makes the next request about job look at the log: something was
// published on its subjects, which may end a hold of it.
func (hs *holds) stale(job string) {
	hs.mu.Lock()
	var those []*hold
	for a := 1; a <= events.AttemptsCap+1; a++ {
		if h := hs.m[holdKey{job, a}]; h != nil {
			those = append(those, h)
		}
	}
	hs.mu.Unlock()
	for _, h := range those {
		h.mu.Lock()
		h.looked = time.Time{}
		h.mu.Unlock()
	}
}

// maxHolds bounds the attempts remembered: more than a node runs at once
// times the nodes that ask one gate instance at once.
const maxHolds = 4096

func (hs *holds) get(job string, attempt int) *hold {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	k := holdKey{job, attempt}
	if h := hs.m[k]; h != nil {
		return h
	}
	if len(hs.m) >= maxHolds {
		// Those over first; if none is, any: it is read again.
		for key, h := range hs.m {
			if h.mu.TryLock() {
				over := h.over != ""
				h.mu.Unlock()
				if over {
					delete(hs.m, key)
				}
			}
		}
		for key := range hs.m {
			if len(hs.m) < maxHolds {
				break
			}
			delete(hs.m, key)
		}
	}
	h := &hold{job: job, attempt: attempt}
	hs.m[k] = h
	return h
}

// held checks, as the log says now (one read of what the job's log holds
// past what was read before), that attempt of job is held on node and its
// hold is not over. Anything else is ErrRefused, saying which. Its node,
// submitter and data, once known, never change.
func (s *Server) held(ctx context.Context, node, job string, attempt int) (*hold, error) {
	if !events.ValidID(job) || attempt < 1 {
		return nil, fmt.Errorf("%w: job %q attempt %d", errBadRequest, job, attempt)
	}
	h := s.holds.get(job, attempt)
	h.mu.Lock()
	defer h.mu.Unlock()
	// Anything new since it was last read? One question to the log's
	// leader, which a lagging replica could not answer: it usually says
	// no. A request within recheck of the last look is answered by it (a
	// node stages and stores its files many at once), unless something was
	// published on the job's subjects since (stale).
	if h.looked.IsZero() || time.Since(h.looked) >= recheck {
		looking := time.Now()
		// The job's last message, which the server finds by its index of
		// subjects: the first message after h.last, when there is none,
		// made it scan the log from there to its end.
		last, err := bus.LeaderLast(ctx, s.js, events.Stream, events.JobSubject(job))
		switch {
		case err == nil && last.Sequence <= h.last:
		case err == nil:
			hist, err := bus.ReadHistory(ctx, s.js, job, h.last+1)
			if err == nil && (hist.Last < last.Sequence || h.refuses(hist, node)) {
				// The replica that answered may lag behind the leader:
				// what it lacks may be the very hold asked about, and a
				// refusal is final for the node. The leader says.
				hist, err = bus.LeaderHistory(ctx, s.js, job, h.last+1)
			}
			if err != nil {
				return nil, err
			}
			h.fold(hist)
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, err
		}
		h.looked = looking
	}
	// One message: another node learns nothing of where the attempt is.
	switch {
	case h.node != node:
		return nil, fmt.Errorf("%w: job %s attempt %d is not held on node %s", ErrRefused, job, attempt, node)
	case h.over != "":
		return nil, fmt.Errorf("%w: the hold of job %s attempt %d on node %s is over: %s", ErrRefused, job, attempt, node, h.over)
	}
	return h, nil
}

// readable reports whether the attempt may read name: an object its staged
// data is stored in (its files and folders, the output of a job it stages
// from), learned once per attempt.
func (s *Server) readable(ctx context.Context, h *hold, st stage.Store, name string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reads == nil {
		reads := map[string]bool{}
		x := stage.NewExpander(st)
		data := h.data
		if h.resume != "" {
			data = append(data[:len(data):len(data)], events.DataRef{Digest: h.resume, Kind: stage.KindDir})
		}
		for _, ref := range data {
			if ref.Digest == "" && ref.FromJob != "" {
				resolved, err := s.outputOf(ctx, st, ref.FromJob)
				if err != nil {
					// The node, which resolves it the same way,
					// fails to stage it, and says why.
					continue
				}
				ref = resolved
			}
			if ref.Digest == "" {
				continue
			}
			names, _, err := x.Objects(ctx, ref.Kind, ref.Digest)
			if errors.Is(err, stage.ErrBadRef) {
				continue
			}
			if err != nil {
				return false, err
			}
			for _, n := range names {
				reads[n] = true
			}
		}
		h.reads = reads
	}
	return h.reads[name], nil
}

// outputOf is the output an earlier, succeeded job returned, as data: what
// a job that stages it (from_job) reads. RUN resolves it alike.
func (s *Server) outputOf(ctx context.Context, st stage.Store, job string) (events.DataRef, error) {
	history, err := bus.ReadJob(ctx, s.js, job, 1)
	if err != nil {
		return events.DataRef{}, err
	}
	over, outcome, ret := events.FinalOutput(history)
	if !over || outcome != events.Succeeded || ret == nil {
		return events.DataRef{}, fmt.Errorf("job %s has not succeeded", job)
	}
	if _, gone := events.DeletedOf(history, events.WhatOutput); gone {
		return events.DataRef{}, fmt.Errorf("the output of job %s was deleted", job)
	}
	return stage.OutputRef(ctx, st, ret.Manifest, ret.Files)
}

// storeOf is the store of the attempt's submitter.
func (s *Server) storeOf(ctx context.Context, h *hold) (stage.Store, error) {
	st, err := s.stores.For(ctx, h.submitter)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, stage.ErrNoBucket) {
		return nil, fmt.Errorf("the store of job %s: %w", h.job, stage.ErrNotFound)
	}
	return st, err
}
