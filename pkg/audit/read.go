package audit

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
)

// readBatch is how many messages one worker decodes at a time.
const readBatch = 512

// Exported is one line of an export (`e31 events --json`): a stored
// message exactly as the log holds it. BodyBase64 carries the body when
// its bytes would not survive as JSON (not JSON at all, or not in the
// compact form JSON encoding gives back).
type Exported struct {
	Seq        uint64              `json:"seq"`
	Subject    string              `json:"subject"`
	Headers    map[string][]string `json:"headers"`
	Body       json.RawMessage     `json:"body,omitempty"`
	BodyBase64 string              `json:"body_base64,omitempty"`
}

// Raw is the stored message an export line stands for.
func (e Exported) Raw() (Raw, error) {
	body := []byte(e.Body)
	if e.BodyBase64 != "" {
		b, err := base64.StdEncoding.DecodeString(e.BodyBase64)
		if err != nil {
			return Raw{}, fmt.Errorf("body_base64: %w", err)
		}
		body = b
	}
	return Raw{Seq: e.Seq, Subject: e.Subject, Headers: nats.Header(e.Headers), Body: body}, nil
}

// ExportError is a line of an export file that is not an exported message.
type ExportError struct {
	Line int
	Err  error
}

// Error says which line, and what is wrong with it.
func (e *ExportError) Error() string {
	return fmt.Sprintf("line %d: not an exported event: %v", e.Line, e.Err)
}

// Unwrap is what made the line unreadable.
func (e *ExportError) Unwrap() error { return e.Err }

// item is one message to decode: stored, or a line of an export.
type item struct {
	raw  Raw
	line []byte
	n    int // line number, for a line
}

// decode turns an item into a decoded message, in place.
func (it *item) decode(d *decoded) error {
	if it.line != nil {
		var e Exported
		if err := json.Unmarshal(it.line, &e); err != nil {
			return &ExportError{Line: it.n, Err: err}
		}
		raw, err := e.Raw()
		if err != nil {
			return &ExportError{Line: it.n, Err: err}
		}
		it.raw = raw
	}
	decodeInto(d, it.raw)
	return nil
}

// ReadStream feeds the Auditor every message of the event log, from the
// first to the last there was when it started, exactly as stored. It reads
// with batched direct gets (bus.Stored), not with the consumer the ledger
// follows the log with, and not with nats.go's: those take a stored
// message with an empty body and a Status header for a status of their
// own and never hand it over, and any tenant can store one.
func (a *Auditor) ReadStream(ctx context.Context, js jetstream.JetStream) error {
	last, err := bus.LastSeq(ctx, js)
	if err != nil {
		return fmt.Errorf("read the log: %w", err)
	}
	if last == 0 {
		return nil
	}
	return a.pipeline(func(emit func(item)) error {
		read := uint64(0)
		for m, err := range bus.Stored(ctx, js, "", 1) {
			if err != nil {
				return fmt.Errorf("read the log after #%d: %w", read, err)
			}
			if m.Sequence > last {
				break
			}
			emit(item{raw: Raw{Seq: m.Sequence, Subject: m.Subject, Headers: m.Header, Body: m.Data}})
			read = m.Sequence
		}
		if read < last {
			return fmt.Errorf("read the log: it ended at #%d, but held #%d when the audit started", read, last)
		}
		return nil
	})
}

// ReadExport feeds the Auditor every line of an export, in the file's
// order: an auditor checks the copy as it is, moved lines and all.
func (a *Auditor) ReadExport(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	return a.pipeline(func(emit func(item)) error {
		n := 0
		for sc.Scan() {
			n++
			if len(sc.Bytes()) == 0 {
				continue
			}
			emit(item{line: append([]byte(nil), sc.Bytes()...), n: n})
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("after line %d: %w", n, err)
		}
		return nil
	})
}

// pipeline decodes what produce emits on every core and ingests it in the
// order it was emitted. Decoding (JSON, digests) is nearly all of the cost
// of an audit; ingesting is a few map lookups.
func (a *Auditor) pipeline(produce func(emit func(item)) error) error {
	workers := a.opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	type work struct {
		items []item
		out   chan result
	}
	todo := make(chan work, 2*workers)
	inOrder := make(chan chan result, 4*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range todo {
				res := result{ds: make([]decoded, len(w.items))}
				for i := range w.items {
					if err := w.items[i].decode(&res.ds[i]); err != nil {
						res.ds, res.err = res.ds[:i], err
						break
					}
				}
				w.out <- res
			}
		}()
	}
	ingested := make(chan error, 1)
	go func() {
		var first error
		for ch := range inOrder {
			res := <-ch
			if first != nil {
				continue
			}
			for i := range res.ds {
				a.ingest(&res.ds[i])
			}
			first = res.err
		}
		ingested <- first
	}()
	batch := make([]item, 0, readBatch)
	flush := func() {
		ch := make(chan result, 1)
		inOrder <- ch
		todo <- work{items: batch, out: ch}
		batch = make([]item, 0, readBatch)
	}
	err := produce(func(it item) {
		batch = append(batch, it)
		if len(batch) == readBatch {
			flush()
		}
	})
	if len(batch) > 0 {
		flush()
	}
	close(todo)
	close(inOrder)
	wg.Wait()
	return errors.Join(err, <-ingested)
}

// result is one batch decoded, up to the first line that is not an export.
type result struct {
	ds  []decoded
	err error
}
