package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// History is what one job's subjects held from some sequence on, at the
// moment they were read.
type History struct {
	// Events are the messages that decode, in stream order.
	Events []events.Envelope
	// Last is the sequence of the last message read, whether it decodes or
	// not: what an append about the job must expect. 0 when there was none.
	Last uint64
	// SetAside counts the messages read that are not valid events (a type
	// this version does not know is not counted: a newer writer's event is
	// no fault). They are in the log, and in no decision.
	SetAside int
}

// ReadHistory reads the messages of one job from stream sequence from
// onwards (1 for all of them). It reads with batched direct gets, so that
// no read leaves anything behind on the server: a job's history is read on
// every conflict, and a consumer per read is what a hostile tenant's junk
// once turned into a flood of consumers.
func ReadHistory(ctx context.Context, js jetstream.JetStream, job string, from uint64) (History, error) {
	var h History
	for m, err := range Stored(ctx, js, events.JobSubject(job), from) {
		if err != nil {
			return History{}, fmt.Errorf("read job %s: %w", job, err)
		}
		h.Last = m.Sequence
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			if !events.IsUnknownType(err) {
				h.SetAside++
			}
			continue
		}
		env.Seq = m.Sequence
		h.Events = append(h.Events, env)
	}
	return h, nil
}

// ReadJob returns the events of one job from stream sequence from onwards
// (1 for all of them), as they are at the time of the call. Messages that
// are not valid events are skipped: see ReadHistory for where they end.
func ReadJob(ctx context.Context, js jetstream.JetStream, job string, from uint64) ([]events.Envelope, error) {
	h, err := ReadHistory(ctx, js, job, from)
	return h.Events, err
}

// Direct gets of a batch of messages (ADR-31: the stream's AllowDirect).
const (
	// directBatch is how many messages one request asks for: a job has a
	// dozen events, a long one a few hundred.
	directBatch = 256
	// directMaxBytes bounds what one request is sent at once.
	directMaxBytes = 8 << 20
	// directWait is how long a reply may take.
	directWait = 5 * time.Second
)

// Headers the server adds to a message it answers a batched direct get
// with; the stored message never had them, and a reader must see the
// message as it was stored.
var directHeaders = [...]string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader,
	jetstream.TimeStampHeaer, "Nats-Num-Pending", "Nats-Last-Sequence"}

// directRequest is the JSON of a direct get request.
type directRequest struct {
	Seq      uint64 `json:"seq"`
	NextFor  string `json:"next_by_subj,omitempty"`
	Batch    int    `json:"batch"`
	MaxBytes int    `json:"max_bytes,omitempty"`
}

// errStopped ends a batch early: the caller stopped ranging.
var errStopped = errors.New("bus: stopped")

// Stored yields every message of the event log stream on filter (which may
// hold wildcards), from sequence from to the end as it is while they are
// read, exactly as stored (headers and body), in stream order. It creates
// nothing on the server: each batch is one direct get request whose
// replies end with an end-of-batch status. nats.go v1.56 has no batched
// direct get, and what orbit.go's jetstreamext offers is one batch per
// call, pre-1.0: this is the loop over batches e31 needs, in one place.
func Stored(ctx context.Context, js jetstream.JetStream, filter string, from uint64) iter.Seq2[*jetstream.RawStreamMsg, error] {
	return stored(ctx, js, filter, from, directBatch)
}

// stored is Stored, batch messages per request.
func stored(ctx context.Context, js jetstream.JetStream, filter string, from uint64, batch int) iter.Seq2[*jetstream.RawStreamMsg, error] {
	return func(yield func(*jetstream.RawStreamMsg, error) bool) {
		nc := js.Conn()
		// A callback, not NextMsg: NextMsg turns any empty message with a
		// 503 Status header into nats.ErrNoResponders and drops it, and a
		// tenant may store one.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		in := make(chan *nats.Msg, batch)
		sub, err := nc.Subscribe(nc.NewInbox(), func(m *nats.Msg) {
			select {
			case in <- m:
			case <-ctx.Done():
			}
		})
		if err == nil {
			err = sub.SetPendingLimits(-1, -1)
		}
		if err != nil {
			yield(nil, fmt.Errorf("direct get on %s: %w", filter, err))
			return
		}
		defer func() { _ = sub.Unsubscribe() }()
		subject := apiPrefix(js.Options()) + "DIRECT.GET." + events.Stream
		seq := max(from, 1)
		for {
			next, more, err := directBatchGet(ctx, nc, in, sub.Subject, subject, filter, seq, batch, yield)
			if errors.Is(err, errStopped) {
				return
			}
			if err != nil {
				yield(nil, fmt.Errorf("direct get on %s from #%d: %w", filter, seq, err))
				return
			}
			if !more {
				return
			}
			seq = next
		}
	}
}

// directBatchGet asks for one batch from seq and hands each message to
// yield. It returns the sequence to ask from next and whether the server
// said more messages match.
func directBatchGet(ctx context.Context, nc *nats.Conn, in <-chan *nats.Msg, inbox, subject, filter string, seq uint64, batch int,
	yield func(*jetstream.RawStreamMsg, error) bool) (uint64, bool, error) {
	req, err := json.Marshal(directRequest{Seq: seq, NextFor: filter, Batch: batch, MaxBytes: directMaxBytes})
	if err != nil {
		return 0, false, err
	}
	if err := nc.PublishRequest(subject, inbox, req); err != nil {
		return 0, false, err
	}
	next := seq
	wait := time.NewTimer(directWait)
	defer wait.Stop()
	for {
		var r *nats.Msg
		select {
		case r = <-in:
			wait.Reset(directWait)
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-wait.C:
			return 0, false, nats.ErrTimeout
		}
		// A stored message comes with the server's Nats-Sequence; a status
		// (end of batch, nothing found, an error) never does. A status
		// header a publisher put in its own message is no status.
		if len(r.Header.Values(jetstream.SequenceHeader)) == 0 {
			switch status := r.Header.Get("Status"); status {
			case "204": // end of batch
				pending, _ := strconv.ParseUint(r.Header.Get("Nats-Num-Pending"), 10, 64)
				return next, pending > 0 && next > seq, nil
			case "404": // nothing matches from seq on
				return next, false, nil
			case "503":
				return 0, false, nats.ErrNoResponders
			default:
				return 0, false, fmt.Errorf("direct get: status %s %s", status, r.Header.Get("Description"))
			}
		}
		m, err := storedOf(r)
		if err != nil {
			return 0, false, err
		}
		next = m.Sequence + 1
		if !yield(m, nil) {
			return 0, false, errStopped
		}
	}
}

// storedOf is the stored message a direct get answered with, without the
// headers the server added to say where it was stored.
func storedOf(r *nats.Msg) (*jetstream.RawStreamMsg, error) {
	h := r.Header
	last := func(key string) string {
		vs := h.Values(key)
		if len(vs) == 0 {
			return ""
		}
		return vs[len(vs)-1]
	}
	seq, err := strconv.ParseUint(last(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("direct get: bad %s: %w", jetstream.SequenceHeader, err)
	}
	subject := last(jetstream.SubjectHeader)
	if subject == "" {
		return nil, fmt.Errorf("direct get: message #%d without a %s", seq, jetstream.SubjectHeader)
	}
	at, err := time.Parse(time.RFC3339Nano, last(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("direct get: message #%d: bad %s: %w", seq, jetstream.TimeStampHeaer, err)
	}
	// The server appends its headers after the stored ones: drop the last
	// value of each, and keep whatever the publisher itself set.
	stored := nats.Header{}
	for k, vs := range h {
		stored[k] = vs
	}
	for _, k := range directHeaders {
		if vs := stored.Values(k); len(vs) > 1 {
			stored[k] = vs[:len(vs)-1]
		} else {
			delete(stored, k)
		}
	}
	if len(stored) == 0 {
		stored = nil
	}
	return &jetstream.RawStreamMsg{Subject: subject, Sequence: seq, Header: stored, Data: r.Data, Time: at}, nil
}

// apiPrefix is where the JetStream API is for js, with its final dot.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}
