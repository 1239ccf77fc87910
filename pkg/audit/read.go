package audit

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

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
	Stored     time.Time           `json:"stored,omitzero"`
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
	return Raw{Seq: e.Seq, Subject: e.Subject, Headers: nats.Header(e.Headers), Body: body, Stored: e.Stored}, nil
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
// first to the last there was when it started, exactly as stored (see
// readLog for how). One goroutine reads, Workers decode and digest batches
// of messages, and one folds them in log order; a failure in any ends them
// all.
func (a *Auditor) ReadStream(ctx context.Context, js jetstream.JetStream) error {
	last, err := bus.LastSeq(ctx, js)
	if err != nil {
		return fmt.Errorf("read the log: %w", err)
	}
	if last == 0 {
		return nil
	}
	if p := a.opts.Progress; p != nil {
		p.Start(int64(last), "reading the log")
		defer p.Done()
	}
	return a.pipeline(ctx, func(ctx context.Context, emit func(item) error) error {
		return readLog(ctx, js, last, func(m Raw) error { return emit(item{raw: m}) })
	})
}

// ReadExport feeds the Auditor every line of an export, in the file's
// order: an auditor checks the copy as it is, moved lines and all.
func (a *Auditor) ReadExport(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	if p := a.opts.Progress; p != nil {
		p.Start(0, "reading the export")
		defer p.Done()
	}
	return a.pipeline(context.Background(), func(ctx context.Context, emit func(item) error) error {
		n := 0
		for sc.Scan() {
			n++
			if len(sc.Bytes()) == 0 {
				continue
			}
			if err := emit(item{line: append([]byte(nil), sc.Bytes()...), n: n}); err != nil {
				return err
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("after line %d: %w", n, err)
		}
		return nil
	})
}

// pipeline decodes what produce emits on every core and folds it in the
// order it was emitted. Decoding (JSON, digests) is most of the audit's
// own cost; folding is a few map lookups, and a record derived when its
// job is over. Batches are handed to the folder through a queue of
// channels in the order they were read, one channel per batch, so that
// however the decoders race, the fold sees the log's order: the checks of
// order, gaps and the chain depend on it.
func (a *Auditor) pipeline(ctx context.Context, produce func(ctx context.Context, emit func(item) error) error) error {
	workers := a.opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	type work struct {
		items []item
		out   chan<- result
	}
	g, ctx := errgroup.WithContext(ctx)
	// Enough batches in flight for every decoder to have the next one at
	// hand, and no more: each is held in memory until folded.
	todo := make(chan work, workers)
	inOrder := make(chan chan result, 2*workers+1)
	g.Go(func() error { // the reader
		defer close(todo)
		defer close(inOrder)
		batch := itemPool.Get().([]item)
		flush := func() error {
			ch := make(chan result, 1)
			select {
			case inOrder <- ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case todo <- work{items: batch, out: ch}:
			case <-ctx.Done():
				return ctx.Err()
			}
			batch = itemPool.Get().([]item)
			return nil
		}
		err := produce(ctx, func(it item) error {
			batch = append(batch, it)
			if len(batch) == readBatch {
				return flush()
			}
			return nil
		})
		if err == nil && len(batch) > 0 {
			err = flush()
		}
		return err
	})
	for range workers {
		g.Go(func() error { // a decoder
			for w := range todo {
				res := result{ds: decodedPool.Get().([]decoded)[:len(w.items)]}
				for i := range w.items {
					if err := w.items[i].decode(&res.ds[i]); err != nil {
						res.ds, res.err = res.ds[:i], err
						break
					}
				}
				w.out <- res // buffered: never waits
				clear(w.items)
				itemPool.Put(w.items[:0]) //nolint:staticcheck // a slice header is small; the array is what is reused
			}
			return nil
		})
	}
	g.Go(func() error { // the folder
		for ch := range inOrder {
			var res result
			select {
			case res = <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			for i := range res.ds {
				a.ingest(&res.ds[i])
			}
			if p := a.opts.Progress; p != nil {
				p.Add(int64(len(res.ds)))
			}
			if res.err != nil {
				return res.err
			}
			if a.inStep != nil {
				// The ledger's records the log has now been read past.
				if err := a.stepTo(a.rep.LastSeq); err != nil {
					return err
				}
			}
			// What the fold keeps of a message it has copied out: the
			// batch's room serves the next one.
			clear(res.ds)
			decodedPool.Put(res.ds[:0]) //nolint:staticcheck // a slice header is small; the array is what is reused

		}
		return nil
	})
	return g.Wait()
}

// decodedPool holds the room of batches folded, for batches to come: a
// decoded message is large, and a million of them allocated anew cost more
// in the allocator and collector than they do to decode.
var decodedPool = sync.Pool{New: func() any { return make([]decoded, 0, readBatch) }}

// itemPool holds the room of batches decoded, for batches to be read: what
// a message decodes to holds what it needs of its item, so the item's room
// serves the next batch as soon as the batch is decoded, rather than a
// new one of 45 KiB for every 512 messages.
var itemPool = sync.Pool{New: func() any { return make([]item, 0, readBatch) }}

// result is one batch decoded, up to the first line that is not an export.
type result struct {
	ds  []decoded
	err error
}
