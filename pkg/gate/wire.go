package gate

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
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
)

// The codes of HeaderError.
const (
	CodeRefused    = "refused"
	CodeNotFound   = "not_found"
	CodeCorrupt    = "corrupt"
	CodeChanged    = "changed"
	CodeFull       = "full"
	CodeBadRequest = "bad_request"
	CodeFailed     = "failed"
)

// ChunkBytes is the most one message of an object carries: well under the
// servers' max_payload (1 MiB).
const ChunkBytes = 256 << 10

// Request is what a node asks about an object of one attempt.
type Request struct {
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	// Name is the object's name in the job's submitter's store.
	Name string `json:"name"`
	// Digest and Size are what a put will store.
	Digest string `json:"digest,omitempty"`
	Size   int64  `json:"size,omitempty"`
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
	}
	return fmt.Errorf("gate: %s", text)
}

// codeOf is the code an error of the server is sent with.
func codeOf(err error) string {
	switch {
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
