package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
)

// CloudEvents attributes in binary mode, one NATS header each.
const (
	HeaderSpecVersion = "ce-specversion"
	HeaderID          = "ce-id"
	HeaderType        = "ce-type"
	HeaderSource      = "ce-source"
	HeaderTime        = "ce-time"
	HeaderSubject     = "ce-subject"
	HeaderContentType = "content-type"
	// HeaderTraceParent and HeaderTraceState are the CloudEvents
	// distributed-tracing extension (W3C trace context), in binary mode
	// like every other attribute: every event of a job carries its trace.
	HeaderTraceParent = "ce-traceparent"
	HeaderTraceState  = "ce-tracestate"
	// HeaderMsgID is JetStream's de-duplication id; it always equals ce-id.
	HeaderMsgID = nats.MsgIdHdr
)

// MaxBodyBytes bounds an event body. Anything larger is refused when decoding:
// a job declaration that big is a mistake or an attack, not a job.
const MaxBodyBytes = 256 << 10

// Envelope is an event with its CloudEvents attributes, and where it was
// stored once it has been read back from the stream.
type Envelope struct {
	ID      string
	Type    string
	Source  string
	Time    time.Time
	Subject string // the job id, or the node id for node events
	// Event is a pointer to one of this package's event types (only
	// pointers implement Event), so that readers need one type switch
	// whether the envelope was decoded or built locally.
	Event Event

	// Trace is the W3C trace context of what caused the event (the
	// CloudEvents distributed-tracing extension); empty when untraced.
	Trace Trace

	// Seq is the stream sequence; zero until the event has been stored.
	Seq uint64
	// NATSSubject is the subject the event was stored under.
	NATSSubject string
}

// New wraps ev about subject (a job or node id) with deterministic attributes.
func New(subject string, ev Event, source string, at time.Time) Envelope {
	return Envelope{
		ID:      ID(subject, ev),
		Type:    ev.Type(),
		Source:  source,
		Time:    at.UTC(),
		Subject: subject,
		Event:   ev,
	}
}

// Msg encodes the envelope as the NATS message that is published.
func (e Envelope) Msg() (*nats.Msg, error) {
	body, err := json.Marshal(e.Event)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", e.Type, err)
	}
	subj, err := SubjectOf(e.Subject, e.Event)
	if err != nil {
		return nil, err
	}
	// The header is made at its size, its values in one array: Header.Set
	// grows the map entry by entry and allocates each value apart, most
	// of what appending an event allocates.
	// Room for the publish's own headers too (an expected sequence).
	h := make(nats.Header, 12)
	vals := make([]string, 0, 10)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(HeaderSpecVersion, "1.0")
	set(HeaderID, e.ID)
	set(HeaderType, e.Type)
	set(HeaderSource, e.Source)
	set(HeaderTime, e.Time.Format(time.RFC3339Nano))
	set(HeaderSubject, e.Subject)
	set(HeaderContentType, "application/json")
	set(HeaderMsgID, e.ID)
	if e.Trace.Parent != "" {
		set(HeaderTraceParent, e.Trace.Parent)
		if e.Trace.State != "" {
			set(HeaderTraceState, e.Trace.State)
		}
	}
	return &nats.Msg{Subject: subj, Header: h, Data: body}, nil
}

// Trace is a W3C trace context as the CloudEvents distributed-tracing
// extension carries it. It is taken as it comes: a malformed one only
// starts a new trace where it is read (see pkg/trace), it never makes an
// event invalid, since tracing must not change what the log means.
type Trace struct {
	// Parent is the traceparent: version-traceid-parentid-flags.
	Parent string
	// State is the tracestate, vendor-specific; usually empty.
	State string
}

// DecodeError says what was wrong with a message that is not a valid event.
// It is permanent: the same bytes will never decode.
type DecodeError struct {
	Subject string
	Err     error
}

func (e *DecodeError) Error() string { return "decode event on " + e.Subject + ": " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// Decode reads an event from a stored message. Unknown fields in the body are
// errors, so that a producer's typo is refused rather than silently dropped;
// an unknown type is ErrUnknownType, which readers skip.
func Decode(subject string, h nats.Header, body []byte) (Envelope, error) {
	fail := func(err error) (Envelope, error) { return Envelope{}, &DecodeError{Subject: subject, Err: err} }
	if len(body) > MaxBodyBytes {
		return fail(fmt.Errorf("body of %d bytes is over the limit of %d", len(body), MaxBodyBytes))
	}
	env := Envelope{
		ID:          h.Get(HeaderID),
		Type:        h.Get(HeaderType),
		Source:      h.Get(HeaderSource),
		Subject:     h.Get(HeaderSubject),
		NATSSubject: subject,
		Trace:       Trace{Parent: h.Get(HeaderTraceParent), State: h.Get(HeaderTraceState)},
	}
	if v := h.Get(HeaderSpecVersion); v != "1.0" {
		return fail(fmt.Errorf("%s: got %q, expected \"1.0\"", HeaderSpecVersion, v))
	}
	for _, a := range [...]struct{ name, v string }{{HeaderID, env.ID}, {HeaderType, env.Type}, {HeaderSource, env.Source}, {HeaderSubject, env.Subject}} {
		if a.v == "" {
			return fail(fmt.Errorf("%s: required", a.name))
		}
	}
	t, err := time.Parse(time.RFC3339Nano, h.Get(HeaderTime))
	if err != nil {
		return fail(fmt.Errorf("%s: expected an RFC 3339 time: %w", HeaderTime, err))
	}
	env.Time = t
	k, ok := kinds[env.Type]
	if !ok {
		return fail(fmt.Errorf("%w %q", ErrUnknownType, env.Type))
	}
	ev, err := decodeBody(k, body)
	if err != nil {
		return fail(fmt.Errorf("%s body: %w", env.Type, err))
	}
	env.Event = ev
	if !storedOn(subject, env.Subject, k, ev) {
		want, err := SubjectOf(env.Subject, ev)
		if err != nil {
			return fail(err)
		}
		return fail(fmt.Errorf("stored on %q, but a %s about %q belongs on %q", subject, env.Type, env.Subject, want))
	}
	return env, nil
}

// decodeBody reads the body of an event of kind k. A body its type's
// shape vouches for is read with a plain Unmarshal, a quarter cheaper than
// the strict stream decoder (see shape), which reads any other.
func decodeBody(k kind, body []byte) (Event, error) {
	if k.shape.vouches(body) {
		ev := k.newEvent()
		if gojson.Unmarshal(body, ev) == nil {
			return ev, nil
		}
	}
	return decodeStrict(k, body)
}

// decodeStrict reads a body as a stream decoder that refuses unknown
// fields and anything after the object does.
func decodeStrict(k kind, body []byte) (ev Event, err error) {
	// goccy/go-json's stream decoder indexes past its buffer on some
	// malformed bodies (an unfinished \u escape followed by a long run of
	// other bytes: the seed in testdata/fuzz/FuzzShapeAgreesWithStream).
	// Any publisher can write such a body, and a panic here would stop
	// every reader of the log at it: it is a body that does not decode.
	defer func() {
		if r := recover(); r != nil {
			ev, err = nil, explain(body, k.newEvent(), fmt.Errorf("the decoder failed on it: %v", r))
		}
	}()
	ev = k.newEvent()
	// goccy/go-json decodes as encoding/json does, unknown fields refused
	// alike, at about twice the speed: decoding is most of what the audit's
	// replay and every service's rebuild from the log cost.
	dec := gojson.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(ev); err != nil {
		return nil, explain(body, k.newEvent(), err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return ev, nil
}

// explain is why a body does not decode, in encoding/json's words, which
// name the field by its path in the JSON (request.memory_bytes) where
// goccy/go-json's name a Go type: a publisher outside e31 knows only the
// JSON. Only refused events pay for decoding twice.
func explain(body []byte, ev Event, fast error) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(ev); err != nil {
		return err
	}
	return fast
}

// IsUnknownType reports whether err means the event's type is not one this
// version knows; such events are skipped, not refused.
func IsUnknownType(err error) bool { return errors.Is(err, ErrUnknownType) }

// Attempt is the attempt number of an event that belongs to one, else 0.
func (e Envelope) Attempt() int {
	h, _ := HoldOf(e.Event)
	return h.Attempt
}

// String is a short form for logs: "ComputeHeld job/held/1 #42".
func (e Envelope) String() string {
	var b strings.Builder
	b.WriteString(Name(e.Type))
	b.WriteString(" ")
	b.WriteString(e.ID)
	if e.Seq > 0 {
		fmt.Fprintf(&b, " #%d", e.Seq)
	}
	return b.String()
}
