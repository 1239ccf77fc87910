package retention

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
)

// maxStoredPage bounds one reply: it must fit in one NATS message.
const maxStoredPage = 500

// serveAPI answers wire.OutputStoredService from the projection until the
// returned function is called, which waits for the requests being
// answered.
func (s *Service) serveAPI() (func(), error) {
	queries := query.New(s.js.Conn(), query.Config{Name: "e31-output", Version: "0.2.0", Description: "stored data and output, and their retention",
		Limits: s.queryLimits, Logger: s.log})
	queries.Handle("stored", wire.OutputStoredService, s.serveStored)
	if err := queries.Start(context.Background()); err != nil {
		return nil, err
	}
	s.queries.Store(queries)
	return queries.Stop, nil
}

// QueryStats are the counts of the stored endpoint: requests refused for
// their reply subject, answered busy, served. Zero until Run serves it.
func (s *Service) QueryStats() query.Stats {
	if q := s.queries.Load(); q != nil {
		return q.Stats()
	}
	return query.Stats{}
}

// storedWait is how long a stored request waits for the projection to read
// the log as far as it asks.
const storedWait = 10 * time.Second

func (s *Service) serveStored(r *query.Request) {
	var q wire.StoredRequest
	if len(r.Data()) > 0 {
		if err := json.Unmarshal(r.Data(), &q); err != nil {
			r.Respond(wire.StoredReply{Error: "bad request: " + err.Error()})
			return
		}
	}
	// The user is the subject's token, which only that user may publish
	// on: a submitter hears about its own jobs only.
	if !r.SeesAll() {
		q.Submitter = r.User
	}
	want := q.MinSeq
	if q.Fresh {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		st, err := s.js.Stream(ctx, events.Stream)
		cancel()
		if err != nil {
			r.Respond(wire.StoredReply{Error: fmt.Sprintf("the log's last sequence: %v", err)})
			return
		}
		want = max(want, st.CachedInfo().State.LastSeq)
	}
	deadline := r.Deadline(storedWait)
	for {
		applied, ch := s.tail.Changed()
		if applied >= want {
			break
		}
		changed, err := r.Await(ch, deadline)
		if err != nil {
			r.Busy(err)
			return
		}
		if !changed {
			// How far OUTPUT has read is told to those who may read the
			// log; a submitter learns nothing of it.
			msg := "OUTPUT is catching up: it has not read the log as far as your request needs yet; try again"
			if r.SeesAll() {
				msg = fmt.Sprintf("OUTPUT is catching up: it has read the log up to #%d, not yet #%d", applied, want)
			}
			r.Respond(wire.StoredReply{Error: msg})
			return
		}
	}
	s.mu.Lock()
	reply := wire.StoredReply{Applied: s.refs.Applied(), Jobs: []wire.Stored{}}
	if !r.SeesAll() {
		reply.Applied = min(reply.Applied, q.MinSeq)
	}
	jobs := s.refs.Jobs()
	slices.SortFunc(jobs, func(a, b *Held) int { return strings.Compare(a.Job, b.Job) })
	for _, h := range jobs {
		if (q.Job != "" && h.Job != q.Job) || (q.Submitter != "" && h.Submitter != q.Submitter) || h.Job <= q.After {
			continue
		}
		keeps := h.holds(events.WhatData) || h.holds(events.WhatOutput)
		if !keeps && (!q.Deleted || !h.Deleted.Any()) {
			continue // nothing left, or nothing ever stored
		}
		if len(reply.Jobs) == maxStoredPage {
			reply.More = true
			break
		}
		reply.Jobs = append(reply.Jobs, storedOf(h))
	}
	s.mu.Unlock()
	r.Respond(reply)
}

// storedOf is what a job keeps, as the API shows it.
func storedOf(h *Held) wire.Stored {
	st := wire.Stored{Job: h.Job, Name: h.Name, Submitter: h.Submitter, Over: h.Over, RetentionSeconds: h.Retention.Seconds(),
		Data:   wire.StoredPart{Files: h.DataFiles, Bytes: h.DataBytes},
		Output: wire.StoredPart{Files: h.OutputFiles, Bytes: h.OutputBytes}}
	if h.Over {
		t := h.Expires()
		st.Expires = &t
	}
	for what, part := range map[string]*wire.StoredPart{events.WhatData: &st.Data, events.WhatOutput: &st.Output} {
		if at, ok := h.Deleted.At(what); ok {
			part.DeletedAt = &at
		}
	}
	return st
}
