package gate

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/retry"
	"github.com/e31net/e31/pkg/stage"
)

// What a node asks the gate (the op token of events.GateSubject).
const (
	OpConsumer = "consumer"
	OpStat     = "stat"
	OpGet      = "get"
	OpPut      = "put"
)

// Ops are the requests the gate answers.
var Ops = []string{OpConsumer, OpStat, OpGet, OpPut}

// Headers of the gate's messages.
const (
	// HeaderError marks a reply that is an error: its value is one of the
	// codes below, its body the message.
	HeaderError = "E31-Gate-Error"
	// HeaderPart numbers the pieces of an object, from 0.
	HeaderPart = "E31-Gate-Part"
	// HeaderEnd marks the last message of an object, with how many pieces
	// it had.
	HeaderEnd = "E31-Gate-End"
	// What a request is about (Request): the job, the attempt, the
	// object's name, and what a put stores (its digest and size).
	HeaderJob     = "E31-Gate-Job"
	HeaderAttempt = "E31-Gate-Attempt"
	HeaderObject  = "E31-Gate-Object"
	HeaderDigest  = "E31-Gate-Digest"
	HeaderSize    = "E31-Gate-Size"
)

// The codes of HeaderError.
const (
	CodeRefused    = "refused"
	CodeNotFound   = "not_found"
	CodeCorrupt    = "corrupt"
	CodeChanged    = "changed"
	CodeFull       = "full"
	CodeBadRequest = "bad_request"
	// CodeUnavailable: the gate could not do it now (it is stopping, its
	// JetStream did not answer): ask again.
	CodeUnavailable = "unavailable"
	CodeFailed      = "failed"
)

// ChunkBytes is the most one message of an object carries: well under the
// servers' max_payload (1 MiB).
const ChunkBytes = 256 << 10

// Request is what a node asks about an object of one attempt, carried in
// the request's headers (HeaderJob and the rest), so that a put's body is
// the object's first piece: an object of one piece, most of what a job
// returns and every chunk of its log, is stored in one round trip.
type Request struct {
	Job     string
	Attempt int
	// Name is the object's name in the job's submitter's store.
	Name string
	// Digest and Size are what a put will store.
	Digest string
	Size   int64
}

// header writes the request into h.
func (q Request) header(h nats.Header) {
	h.Set(HeaderJob, q.Job)
	h.Set(HeaderAttempt, strconv.Itoa(q.Attempt))
	h.Set(HeaderObject, q.Name)
	if q.Digest != "" {
		h.Set(HeaderDigest, q.Digest)
		h.Set(HeaderSize, strconv.FormatInt(q.Size, 10))
	}
}

// requestOf reads the request in h.
func requestOf(h nats.Header) (Request, error) {
	q := Request{Job: h.Get(HeaderJob), Name: h.Get(HeaderObject), Digest: h.Get(HeaderDigest)}
	var err error
	if q.Attempt, err = strconv.Atoi(h.Get(HeaderAttempt)); err != nil {
		return q, fmt.Errorf("%w: attempt %q", errBadRequest, h.Get(HeaderAttempt))
	}
	if size := h.Get(HeaderSize); size != "" {
		if q.Size, err = strconv.ParseInt(size, 10, 64); err != nil || q.Size < 0 {
			return q, fmt.Errorf("%w: size %q", errBadRequest, size)
		}
	}
	return q, nil
}

// Info is the answer to a stat.
type Info struct {
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// Session is the answer to a put: where the object's pieces go.
type Session struct {
	ID string `json:"session"`
}

// ErrRefused is the gate refusing a request: the attempt is not held on
// the node that asks, its hold is over, or what is asked is no part of it.
// It does not pass by itself.
var ErrRefused = errors.New("gate: refused")

// errorOf is the error a reply says, nil if it says none.
func errorOf(m *nats.Msg) error {
	if m.Header == nil {
		return nil
	}
	if status := m.Header.Get("Status"); status == "503" {
		return fmt.Errorf("gate: %w", nats.ErrNoResponders)
	}
	code := m.Header.Get(HeaderError)
	if code == "" {
		return nil
	}
	text := string(m.Data)
	switch code {
	case CodeRefused:
		return fmt.Errorf("%w: %s", ErrRefused, text)
	case CodeNotFound:
		return fmt.Errorf("gate: %s: %w", text, stage.ErrNotFound)
	case CodeCorrupt:
		return fmt.Errorf("gate: %s: %w", text, stage.ErrCorrupt)
	case CodeChanged:
		return fmt.Errorf("gate: %s: %w", text, stage.ErrChanged)
	case CodeFull:
		return fmt.Errorf("gate: %s: %w", text, stage.ErrFull)
	case CodeBadRequest:
		return bus.Permanent(fmt.Errorf("gate: bad request: %s", text))
	case CodeUnavailable:
		return unavailable("gate: " + text)
	}
	return fmt.Errorf("gate: %s", text)
}

// unavailable is the gate saying it could not do it now: an error that
// passes (retry.Transient).
type unavailable string

func (u unavailable) Error() string   { return string(u) }
func (u unavailable) Transient() bool { return true }

// codeOf is the code an error of the server is sent with.
func codeOf(err error) string {
	switch {
	case errors.Is(err, context.Canceled) || retry.Transient(err):
		return CodeUnavailable
	case errors.Is(err, ErrRefused):
		return CodeRefused
	case errors.Is(err, errBadRequest):
		return CodeBadRequest
	case errors.Is(err, stage.ErrNotFound):
		return CodeNotFound
	case errors.Is(err, stage.ErrCorrupt), errors.Is(err, stage.ErrBadManifest):
		return CodeCorrupt
	case errors.Is(err, stage.ErrChanged):
		return CodeChanged
	case errors.Is(err, stage.ErrFull):
		return CodeFull
	}
	return CodeFailed
}

// errBadRequest is a request that cannot be understood.
var errBadRequest = errors.New("bad request")

// subjectOf is where node asks op.
func subjectOf(node, op string) string { return events.GateSubject(node, op) }
