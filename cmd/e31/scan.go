package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// rawEvent is one stored message exactly as the log holds it: the form of
// `e31 events --json` and of the files `e31 audit --from` reads.
type rawEvent struct {
	Seq     uint64              `json:"seq"`
	Subject string              `json:"subject"`
	Headers map[string][]string `json:"headers"`
	Body    json.RawMessage     `json:"body"`
	// BodyBase64 is the body's exact bytes when they would not come back
	// from the JSON above (not JSON, or not compact): the export must give
	// an auditor the digests the ledger computed.
	BodyBase64 string `json:"body_base64,omitempty"`
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

func natsHeader(h map[string][]string) nats.Header { return nats.Header(h) }

// scan calls fn with every stored message matching filters, in log order,
// up to the end of the log as of the call or, with follow, for ever.
func (c *client) scan(ctx context.Context, filters []string, follow bool, fn func(rawEvent) error) error {
	cons, err := c.js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	if err != nil {
		return troubleErr(fmt.Errorf("read the log: %w", err))
	}
	pending := cons.CachedInfo().NumPending
	if pending == 0 && !follow {
		return nil
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return troubleErr(fmt.Errorf("read the log: %w", err))
	}
	defer iter.Stop()
	stop := context.AfterFunc(ctx, iter.Stop)
	defer stop()
	for read := uint64(0); follow || read < pending; read++ {
		m, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return troubleErr(fmt.Errorf("read the log: %w", err))
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		body := json.RawMessage(m.Data())
		var exact string
		if !exactJSON(body) {
			exact = base64.StdEncoding.EncodeToString(m.Data())
		}
		if !json.Valid(body) {
			b, _ := json.Marshal(string(m.Data()))
			body = b
		}
		if err := fn(rawEvent{Seq: md.Sequence.Stream, Subject: m.Subject(), Headers: m.Headers(), Body: body, BodyBase64: exact}); err != nil {
			return err
		}
		if !follow && md.NumPending == 0 {
			return nil
		}
	}
	return nil
}
