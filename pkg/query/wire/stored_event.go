package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"time"
)

// StoredEvent is one message exactly as the log holds it: the form of `e31
// events --json`, of the files `e31 audit --from` reads, and of the ledger's
// events endpoint.
type StoredEvent struct {
	Seq     uint64              `json:"seq"`
	Subject string              `json:"subject"`
	Headers map[string][]string `json:"headers"`
	Body    json.RawMessage     `json:"body"`
	// BodyBase64 is the body's exact bytes when they would not come back
	// from the JSON above (not JSON, or not compact): the export must give
	// an auditor the digests the ledger computed.
	BodyBase64 string `json:"body_base64,omitempty"`
	// Stored is when the stream stored it, by the server's clock (the
	// log's own time, which no publisher sets): what the audit times
	// attempts by.
	Stored time.Time `json:"stored,omitzero"`
}

// NewStoredEvent is the stored message seq on subject with headers h and
// body data, stored at stored.
func NewStoredEvent(seq uint64, subject string, h map[string][]string, data []byte, stored time.Time) StoredEvent {
	body := json.RawMessage(data)
	var exact string
	if !exactJSON(body) {
		exact = base64.StdEncoding.EncodeToString(data)
	}
	if !json.Valid(body) {
		b, _ := json.Marshal(string(data))
		body = b
	}
	return StoredEvent{Seq: seq, Subject: subject, Headers: h, Body: body, BodyBase64: exact, Stored: stored.UTC()}
}

// exactJSON reports whether b is JSON that encoding it as a RawMessage
// leaves byte for byte as it is: compact, with HTML characters escaped.
func exactJSON(b []byte) bool {
	if !json.Valid(b) {
		return false
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		return false
	}
	var e bytes.Buffer
	json.HTMLEscape(&e, c.Bytes())
	return bytes.Equal(e.Bytes(), b)
}

// Size is about how many bytes the event takes in a JSON reply.
func (e StoredEvent) Size() int {
	n := len(e.Subject) + len(e.Body) + len(e.BodyBase64) + 64
	for k, vs := range e.Headers {
		for _, v := range vs {
			n += len(k) + len(v) + 8
		}
	}
	return n
}
