package output

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/e31net/e31/pkg/api"
	"github.com/e31net/e31/pkg/events"
)

// maxStoredPage bounds one reply: it must fit in one NATS message.
const maxStoredPage = 500

// serveAPI answers api.OutputStoredService from the projection until the returned
// function is called.
func (s *Service) serveAPI() (func(), error) {
	svc, err := micro.AddService(s.js.Conn(), micro.Config{Name: "e31-output", Version: "0.1.0", Description: "stored data and output, and their retention"})
	if err != nil {
		return nil, err
	}
	if err := svc.AddEndpoint("stored", micro.HandlerFunc(s.serveStored), micro.WithEndpointSubject(api.OutputStoredService)); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return func() { _ = svc.Stop() }, nil
}

func (s *Service) serveStored(req micro.Request) {
	var q api.StoredRequest
	if len(req.Data()) > 0 {
		if err := json.Unmarshal(req.Data(), &q); err != nil {
			_ = req.RespondJSON(api.StoredReply{Error: "bad request: " + err.Error()})
			return
		}
	}
	// The user is the subject's token, which only that user may publish
	// on: a submitter hears about its own jobs only.
	user := api.UserOf(req.Subject())
	if user == "" {
		_ = req.RespondJSON(api.StoredReply{Error: "ask on e31.api.<user>.output.stored"})
		return
	}
	if user != api.Auditor && user != events.Operator {
		q.Submitter = user
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.waitFor(ctx, q.MinSeq); err != nil {
		_ = req.RespondJSON(api.StoredReply{Error: err.Error()})
		return
	}
	s.mu.Lock()
	reply := api.StoredReply{Applied: s.refs.Applied(), Jobs: []api.Stored{}}
	jobs := s.refs.Jobs()
	slices.SortFunc(jobs, func(a, b *Held) int { return strings.Compare(a.Job, b.Job) })
	for _, h := range jobs {
		if (q.Job != "" && h.Job != q.Job) || (q.Submitter != "" && h.Submitter != q.Submitter) || h.Job <= q.After {
			continue
		}
		keeps := h.holds(events.WhatData) || h.holds(events.WhatOutput)
		if !keeps && (!q.Deleted || len(h.Deleted) == 0) {
			continue // nothing left, or nothing ever stored
		}
		if len(reply.Jobs) == maxStoredPage {
			reply.More = true
			break
		}
		reply.Jobs = append(reply.Jobs, storedOf(h))
	}
	s.mu.Unlock()
	_ = req.RespondJSON(reply)
}

// storedOf is what a job keeps, as the API shows it.
func storedOf(h *Held) api.Stored {
	st := api.Stored{Job: h.Job, Name: h.Name, Submitter: h.Submitter, Over: h.Over, RetentionSeconds: h.Retention.Seconds(),
		Data:   api.StoredPart{Files: h.DataFiles, Bytes: h.DataBytes},
		Output: api.StoredPart{Files: h.OutputFiles, Bytes: h.OutputBytes}}
	if h.Over {
		t := h.Expires()
		st.Expires = &t
	}
	for what, part := range map[string]*api.StoredPart{events.WhatData: &st.Data, events.WhatOutput: &st.Output} {
		if at, ok := h.Deleted[what]; ok {
			part.DeletedAt = &at
		}
	}
	return st
}
