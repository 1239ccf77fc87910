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
// onwards (1 for all of them), as they are at the time of the call. It
// reads with batched direct gets, so that no read leaves anything behind
// on the server: a job's history is read on every conflict, and a consumer
// per read is what a hostile tenant's junk once turned into a flood of
// consumers. Its cost is bounded by the job's span in the log, whatever
// the length of the log: see storedJob.
func ReadHistory(ctx context.Context, js jetstream.JetStream, job string, from uint64) (History, error) {
	var h History
	for m, err := range StoredJob(ctx, js, job, from) {
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

// Headers the server adds to a message it answers a direct get with, one
// message (singleHeaders) or a batch (batchHeaders); the stored message
// never had them, and a reader must see the message as it was stored.
var (
	singleHeaders = []string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer}
	batchHeaders  = append(singleHeaders[:len(singleHeaders):len(singleHeaders)], "Nats-Num-Pending", "Nats-Last-Sequence")
)

// directRequest is the JSON of a direct get request.
type directRequest struct {
	Seq       uint64   `json:"seq,omitempty"`
	NextFor   string   `json:"next_by_subj,omitempty"`
	LastFor   string   `json:"last_by_subj,omitempty"`
	MultiLast []string `json:"multi_last,omitempty"`
	Batch     int      `json:"batch"`
	MaxBytes  int      `json:"max_bytes,omitempty"`
}

// errStopped ends a batch early: the caller stopped ranging.
var errStopped = errors.New("bus: stopped")

// errTooMany is the server's answer to a multi_last request for more
// subjects than it answers at once (413).
var errTooMany = errors.New("bus: too many subjects for one direct get")

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
		g, err := newGetter(ctx, js, events.Stream, batch)
		if err != nil {
			yield(nil, fmt.Errorf("direct get on %s: %w", filter, err))
			return
		}
		defer g.close()
		seq := max(from, 1)
		for {
			next, pending, err := g.batch(filter, seq, batch, yield)
			if errors.Is(err, errStopped) {
				return
			}
			if err != nil {
				yield(nil, fmt.Errorf("direct get on %s from #%d: %w", filter, seq, err))
				return
			}
			if pending == 0 || next == seq {
				return
			}
			seq = next
		}
	}
}

// StoredJob yields the messages of one job (all of its subjects) from
// sequence from, as they were when it started reading, exactly as stored,
// in stream order: the last one it yields is the job's true last message
// then, and anything newer makes an append that expects it conflict. What
// it costs the server does not grow with the length of the log.
//
// nats-server finds the messages of a filter with wildcards (the job's
// subjects) by its index of subjects only from the start of the log; from
// anywhere else it scans the log message by message, since a log of many
// jobs has too many subjects for its per-block skipping (64k), and a batch
// that asks for more than the job has left scans on to the end of the log
// (nats-server 2.15 honours up_to_seq in multi_last requests only). So it
// reads, each with one direct get that the server answers by its index:
//
//   - the last message of each of the job's subjects (multi_last): a job
//     has a dozen, and most hold one message each;
//   - the job's first message and how many it has (a batch of one from the
//     start of the log, counted by the index without reading a block).
//
// If the two agree (as many lasts as messages, the first among them), the
// lasts are the job's messages, unless the replica that counted lags the
// one that answered the lasts (a subject with two messages in the one may
// have one in the other). Where the job's messages lie close together (a
// short job: a few hundred messages of other jobs between its first and
// its last), a batch of exactly as many messages as the job has, from the
// start of the log, costs the server a scan of that stretch and is read
// instead. Where they lie far apart (a job that waited or ran while the
// log grew), each subject is asked how many messages it has and which is
// first, by the index: one message, the same as its last, in a replica
// that holds that last, means the subject never had another before it.
// A job with a subject of several messages far apart (a retry on the same
// node a long time later, a tenant's junk) is read with the batch: bounded
// by the stretch between its first and last message.
func StoredJob(ctx context.Context, js jetstream.JetStream, job string, from uint64) iter.Seq2[*jetstream.RawStreamMsg, error] {
	filter := events.JobSubject(job)
	return func(yield func(*jetstream.RawStreamMsg, error) bool) {
		g, err := newGetter(ctx, js, events.Stream, directBatch)
		if err != nil {
			yield(nil, fmt.Errorf("direct get on %s: %w", filter, err))
			return
		}
		defer g.close()
		var first *jetstream.RawStreamMsg
		_, pending, err := g.batch(filter, 1, 1, func(m *jetstream.RawStreamMsg, _ error) bool {
			first = m
			return true
		})
		if err != nil {
			yield(nil, fmt.Errorf("direct get on %s: %w", filter, err))
			return
		}
		if first == nil {
			return // no message on the job's subjects
		}
		total := pending + 1
		if total == 1 {
			if first.Sequence >= from {
				yield(first, nil)
			}
			return
		}
		last, err := g.get(directRequest{LastFor: filter})
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			yield(nil, fmt.Errorf("direct get of the last message on %s: %w", filter, err))
			return
		}
		if last != nil && last.Sequence-first.Sequence > shortSpan {
			lasts, err := g.lasts(filter)
			if err == nil && uint64(len(lasts)) == total && len(lasts) <= maxAlone && lasts[0].Sequence == first.Sequence {
				var one bool
				if one, err = g.alone(lasts); err == nil && one {
					for _, m := range lasts {
						if m.Sequence >= from && !yield(m, nil) {
							return
						}
					}
					return
				}
			}
			if err != nil {
				yield(nil, fmt.Errorf("direct get of the last messages on %s: %w", filter, err))
				return
			}
		}
		read := uint64(0)
		pass := func(m *jetstream.RawStreamMsg, _ error) bool {
			read++
			return m.Sequence < from || yield(m, nil)
		}
		// Past the first batch (a job with more than a batch of messages:
		// a tenant's junk), each batch goes on from the last message.
		for seq := uint64(1); read < total; {
			next, _, err := g.batch(filter, seq, int(min(total-read, directBatch)), pass)
			if errors.Is(err, errStopped) {
				return
			}
			if err != nil {
				yield(nil, fmt.Errorf("direct get on %s from #%d: %w", filter, seq, err))
				return
			}
			if next == seq {
				return // nothing came: the log is append only, so never
			}
			seq = next
		}
	}
}

// maxAlone is the most subjects StoredJob asks about one by one: a job
// has a dozen; one with more holds other tenants' junk (any tenant may
// publish on its own tail of any job's subjects), and is read with the
// batch, which its junk makes no longer than its span.
const maxAlone = 64

// shortSpan is how many messages of the log may lie between a job's first
// and last for StoredJob to read them with one batch rather than subject
// by subject: the server scans them at about a tenth of a microsecond
// each, where a question about one subject costs some tens.
const shortSpan = 1024

// lasts is the last message of each subject on filter, in stream order;
// none if the filter has more subjects than the server answers for at once
// (a tenant's junk: the caller reads the job another way).
func (g *getter) lasts(filter string) ([]*jetstream.RawStreamMsg, error) {
	var lasts []*jetstream.RawStreamMsg
	pending, err := g.batched(directRequest{MultiLast: []string{filter}, MaxBytes: directMaxBytes}, func(m *jetstream.RawStreamMsg) bool {
		lasts = append(lasts, m)
		return true
	})
	if errors.Is(err, errTooMany) || pending > 0 {
		return nil, nil
	}
	return lasts, err
}

// alone reports whether each of lasts, the last message of its subject,
// is the only message its subject holds: one batch of one per subject,
// from the start of the log, which the server answers by its index of
// subjects. The replica that answers holds the message, so holds anything
// before it on its subject too.
func (g *getter) alone(lasts []*jetstream.RawStreamMsg) (bool, error) {
	for _, l := range lasts {
		var first uint64
		_, pending, err := g.batch(l.Subject, 1, 1, func(m *jetstream.RawStreamMsg, _ error) bool {
			first = m.Sequence
			return true
		})
		if err != nil || pending > 0 || first != l.Sequence {
			return false, err
		}
	}
	return true, nil
}

// getter makes direct get requests and takes their replies in a callback,
// not NextMsg: NextMsg turns any empty message with a 503 Status header
// into nats.ErrNoResponders and drops it, and a tenant may store one.
type getter struct {
	ctx     context.Context
	cancel  context.CancelFunc
	nc      *nats.Conn
	sub     *nats.Subscription
	in      chan *nats.Msg
	subject string
}

// newGetter subscribes to the replies of direct gets in stream of up to
// batch messages each; close unsubscribes.
func newGetter(ctx context.Context, js jetstream.JetStream, stream string, batch int) (*getter, error) {
	g := &getter{nc: js.Conn(), in: make(chan *nats.Msg, batch+1),
		subject: APIPrefix(js.Options()) + "DIRECT.GET." + stream}
	g.ctx, g.cancel = context.WithCancel(ctx)
	sub, err := g.nc.Subscribe(g.nc.NewInbox(), func(m *nats.Msg) {
		select {
		case g.in <- m:
		case <-g.ctx.Done():
		}
	})
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err != nil {
		g.cancel()
		return nil, err
	}
	g.sub = sub
	return g, nil
}

func (g *getter) close() {
	g.cancel()
	_ = g.sub.Unsubscribe()
}

// batch asks for one batch of the messages on filter from seq and hands
// each to yield. It returns the sequence to ask from next (seq if nothing
// came) and how many more messages match after the last one it handed
// over, as the server counted them.
func (g *getter) batch(filter string, seq uint64, batch int, yield func(*jetstream.RawStreamMsg, error) bool) (uint64, uint64, error) {
	next := seq
	pending, err := g.batched(directRequest{Seq: seq, NextFor: filter, Batch: batch, MaxBytes: directMaxBytes}, func(m *jetstream.RawStreamMsg) bool {
		next = m.Sequence + 1
		return yield(m, nil)
	})
	return next, pending, err
}

// batched sends one direct get that the server answers with a batch and
// hands each stored message to each, until the end of the batch; each
// returning false ends it with errStopped. It returns how many more
// messages matched past those sent, as the end of the batch counts them
// (0 when none matched at all).
func (g *getter) batched(req directRequest, each func(*jetstream.RawStreamMsg) bool) (pending uint64, err error) {
	err = g.ask(req, func(r *nats.Msg) (bool, error) {
		// A stored message comes with the server's Nats-Sequence; a status
		// (end of batch, nothing found, an error) never does. A status
		// header a publisher put in its own message is no status.
		if len(r.Header.Values(jetstream.SequenceHeader)) == 0 {
			switch status := r.Header.Get("Status"); status {
			case "204": // end of batch
				pending, _ = strconv.ParseUint(r.Header.Get("Nats-Num-Pending"), 10, 64)
				return true, nil
			case "404": // nothing matches
				return true, nil
			case "413":
				return true, errTooMany
			case "503":
				return true, nats.ErrNoResponders
			default:
				return true, fmt.Errorf("direct get: status %s %s", status, r.Header.Get("Description"))
			}
		}
		m, err := storedOf(r, batchHeaders)
		if err != nil {
			return true, err
		}
		if !each(m) {
			return true, errStopped
		}
		return false, nil
	})
	return pending, err
}

// MaxLastOf is the most subjects LastOf reads at once: the server answers
// at most 1,024 in one request.
const MaxLastOf = 1024

// LastOf reads the last message of each of subjects (at most MaxLastOf: a
// bucket's keys) in stream with one direct get, in stream order, exactly
// as stored; a subject without one is left out. All come from one replica
// at one moment, which may lag the stream's leader: read a key whose
// revision is known with them, as a witness (the ledger reads its
// checkpoint). whole is false if the answer was cut short (the server
// stops at directMaxBytes): the subjects it did not reach are left out too.
func LastOf(ctx context.Context, js jetstream.JetStream, stream string, subjects []string) (msgs []*jetstream.RawStreamMsg, whole bool, err error) {
	if len(subjects) > MaxLastOf {
		return nil, false, fmt.Errorf("bus: the last messages of %d subjects asked at once, more than %d", len(subjects), MaxLastOf)
	}
	g, err := newGetter(ctx, js, stream, len(subjects))
	if err != nil {
		return nil, false, fmt.Errorf("direct get in %s: %w", stream, err)
	}
	defer g.close()
	pending, err := g.batched(directRequest{MultiLast: subjects, MaxBytes: directMaxBytes}, func(m *jetstream.RawStreamMsg) bool {
		msgs = append(msgs, m)
		return true
	})
	if err != nil {
		return nil, false, fmt.Errorf("direct get of the last messages of %d subjects in %s: %w", len(subjects), stream, err)
	}
	return msgs, pending == 0, nil
}

// one is the first message on filter from seq, without a batch: the
// server then counts nothing. jetstream.ErrMsgNotFound if there is none.
func (g *getter) one(filter string, seq uint64) (*jetstream.RawStreamMsg, error) {
	return g.get(directRequest{Seq: seq, NextFor: filter})
}

// get is the one message req (no batch) asks for; jetstream.ErrMsgNotFound
// if there is none.
func (g *getter) get(req directRequest) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	err := g.ask(req, func(r *nats.Msg) (bool, error) {
		if len(r.Header.Values(jetstream.SequenceHeader)) == 0 {
			switch status := r.Header.Get("Status"); status {
			case "404":
				return true, jetstream.ErrMsgNotFound
			case "503":
				return true, nats.ErrNoResponders
			default:
				return true, fmt.Errorf("direct get: status %s %s", status, r.Header.Get("Description"))
			}
		}
		var err error
		m, err = storedOf(r, singleHeaders)
		return true, err
	})
	return m, err
}

// ask sends one direct get request and hands its replies to take until
// take says that was the last, or fails.
func (g *getter) ask(req directRequest, take func(*nats.Msg) (bool, error)) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if err := g.nc.PublishRequest(g.subject, g.sub.Subject, body); err != nil {
		return err
	}
	wait := time.NewTimer(directWait)
	defer wait.Stop()
	for {
		var r *nats.Msg
		select {
		case r = <-g.in:
			wait.Reset(directWait)
		case <-g.ctx.Done():
			return g.ctx.Err()
		case <-wait.C:
			return nats.ErrTimeout
		}
		if last, err := take(r); last || err != nil {
			return err
		}
	}
}

// storedOf is the stored message a direct get answered with, without the
// headers (added) the server added to say where it was stored.
func storedOf(r *nats.Msg, added []string) (*jetstream.RawStreamMsg, error) {
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
	for _, k := range added {
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

// APIPrefix is where the JetStream API is for a JetStream of options o,
// with its final dot: what a request nats.go has no call for is sent
// under (direct gets, pulls).
func APIPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}
