package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// Decision decides what a step appends, given what happened to the job after
// the event that triggered the step (nothing, on the fast path). It must be a
// pure function of its input: it is called again after a conflict.
type Decision func(after []events.Envelope) ([]events.Event, error)

// maxReactRounds bounds how often React re-decides: each round means someone
// else appended to the same job in the few milliseconds since the last one.
const maxReactRounds = 16

// React appends the events decide returns about trigger's job, but only while
// trigger (or, after a conflict, the last event read) is still the job's last
// event. On a conflict it reads what came after the trigger and decides
// again. This is what makes a redelivered trigger change nothing twice.
func (p *Publisher) React(ctx context.Context, trigger events.Envelope, decide Decision) ([]events.Envelope, error) {
	job := trigger.Subject
	var after []events.Envelope
	expect := trigger.Seq
	for round := 0; round < maxReactRounds; round++ {
		evs, err := decide(after)
		if err != nil || len(evs) == 0 {
			return nil, err
		}
		stored, err := p.appendChain(ctx, job, evs, expect)
		if !errors.Is(err, ErrConflict) {
			return stored, err
		}
		// Expect the last message stored for the job, whatever it is: a
		// message that does not decode (a tenant may publish junk on its
		// own tail of any job's subjects) is in no decision, but the server
		// counts it, and expecting the last event instead would conflict
		// for ever.
		h, err := ReadHistory(ctx, p.js, job, trigger.Seq+1)
		if err != nil {
			return nil, fmt.Errorf("react to %s: %w", trigger, err)
		}
		after, expect = h.Events, max(trigger.Seq, h.Last)
	}
	return nil, fmt.Errorf("react to %s: the job's log kept moving for %d rounds", trigger, maxReactRounds)
}

// appendChain appends evs in order, each expecting the one before it.
func (p *Publisher) appendChain(ctx context.Context, job string, evs []events.Event, expect uint64) ([]events.Envelope, error) {
	stored := make([]events.Envelope, 0, len(evs))
	for _, ev := range evs {
		env, err := p.Append(ctx, job, ev, ExpectLast(expect))
		if err != nil {
			return stored, err
		}
		stored = append(stored, env)
		expect = env.Seq
	}
	return stored, nil
}

// ReplayOptions says what to replay.
type ReplayOptions struct {
	// Filters are subject filters; default: every job and node event.
	Filters []string
	// From is the first stream sequence to read; 0 or 1 means the beginning.
	From uint64
	// Logger reports events that are skipped because they cannot be decoded.
	Logger *slog.Logger
}

// Replay reads the stream from opts.From up to its last event at the time of
// the call and calls fn with each decodable event, in order. It returns the
// last stream sequence it read (or From-1). Events of unknown types and
// malformed events are skipped: a reader must not stop at what a newer or
// hostile writer left in the log.
//
// It reads with direct gets, not a consumer: nats.go's consumers take a
// stored message with an empty body and a Status header for a status of
// their own and never hand it over, and an ordered consumer then starts
// again before it, for ever. Any tenant can store one on its own tail.
func Replay(ctx context.Context, js jetstream.JetStream, opts ReplayOptions, fn func(events.Envelope) error) (uint64, error) {
	if len(opts.Filters) == 0 {
		opts.Filters = []string{events.JobSubjects, events.NodeSubjects}
	}
	stream, err := js.Stream(ctx, events.Stream)
	if err != nil {
		return max(opts.From, 1) - 1, fmt.Errorf("replay: %w", err)
	}
	end := stream.CachedInfo().State.LastSeq
	filter, match := "", opts.Filters
	if len(opts.Filters) == 1 {
		filter, match = opts.Filters[0], nil
	}
	last := max(opts.From, 1) - 1
	for m, err := range Stored(ctx, js, filter, opts.From) {
		if err != nil {
			return last, fmt.Errorf("replay after #%d: %w", last, err)
		}
		if m.Sequence > end {
			break
		}
		last = m.Sequence
		if match != nil && !matchesAny(match, m.Subject) {
			continue
		}
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			if opts.Logger != nil && !events.IsUnknownType(err) {
				opts.Logger.Warn("replay: skipping an event that does not decode", "seq", last, "err", err)
			}
			continue
		}
		env.Seq = last
		if err := fn(env); err != nil {
			return last, err
		}
	}
	return last, nil
}

// matchesAny reports whether subject matches one of the NATS subject filters.
func matchesAny(filters []string, subject string) bool {
	for _, f := range filters {
		if matches(f, subject) {
			return true
		}
	}
	return false
}

// matches reports whether subject matches the NATS subject filter f:
// "*" is one token, a final ">" one or more.
func matches(f, subject string) bool {
	for {
		ft, frest, fmore := strings.Cut(f, ".")
		st, srest, smore := strings.Cut(subject, ".")
		switch {
		case ft == ">":
			return true
		case ft != "*" && ft != st:
			return false
		case !fmore || !smore:
			return fmore == smore
		}
		f, subject = frest, srest
	}
}

// Owner is the submitter of job: the identity its first request was
// published under (the subject's last token, bound by the server's
// permissions to who published it). Only the first request counts: anyone
// may publish a request under any job id on its own tail, and a later one,
// or junk, says nothing about whose job it is. A job with no request (the
// operator wrote its JobSubmitted) belongs to whom its first event names, ""
// if that is no JobSubmitted; jetstream.ErrMsgNotFound when the job has no
// events. A first request on a subject that is not e31's (an identity no
// e31 id could be) makes the job nobody's: "".
func Owner(ctx context.Context, js jetstream.JetStream, job string) (string, error) {
	m, err := FirstRequest(ctx, js, job)
	if err == nil {
		if s, err := events.ParseSubject(m.Subject); err == nil && s.IsRequest() {
			return s.Identity, nil
		}
		return "", nil
	}
	if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", err
	}
	m, err = first(ctx, js, events.JobSubject(job))
	if err != nil {
		return "", fmt.Errorf("owner of %s: %w", job, err)
	}
	if env, err := events.Decode(m.Subject, m.Header, m.Data); err == nil {
		if sub, ok := env.Event.(*events.JobSubmitted); ok {
			return sub.Submitter, nil
		}
	}
	return "", nil
}

// FirstRequest is the first message stored on the job's request subjects
// (e31.job.<job>.requested.*), whether it decodes or not: the one request
// that says what the job is. jetstream.ErrMsgNotFound if there is none.
func FirstRequest(ctx context.Context, js jetstream.JetStream, job string) (*jetstream.RawStreamMsg, error) {
	m, err := first(ctx, js, events.RequestSubject(job, "*"))
	if err != nil {
		return nil, fmt.Errorf("first request of %s: %w", job, err)
	}
	return m, nil
}

// first is the first message stored on filter; jetstream.ErrMsgNotFound
// if there is none. Read with a direct get of one message, not a batch
// (a batch's end counts what is pending after it, which costs the server
// more than finding the message), and not with nats.go's GetMsg, which
// takes a stored empty message with a 503 Status header, which a tenant
// may publish, for "no responders": a retry would fail the same way for
// ever.
func first(ctx context.Context, js jetstream.JetStream, filter string) (*jetstream.RawStreamMsg, error) {
	g, err := newGetter(ctx, js, events.Stream, 1)
	if err != nil {
		return nil, err
	}
	defer g.close()
	return g.one(filter, 1)
}

// Last is the last message stored on subject, a literal subject (one kind
// of one job's events), whether it decodes or not;
// jetstream.ErrMsgNotFound if there is none. The server finds it in its
// index of subjects, however long the log: one direct get of the last
// message for the subject, where reading the job's history from a
// sequence on makes the server scan the log after it. For subjects only
// e31's services publish on: a reply that is a status is taken for one,
// and a tenant may store a message that looks like a status on its own
// tail of a job's subjects (see first).
func Last(ctx context.Context, js jetstream.JetStream, subject string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, directWait)
	defer cancel()
	r, err := js.Conn().RequestWithContext(ctx, APIPrefix(js.Options())+"DIRECT.GET."+events.Stream+"."+subject, nil)
	if err != nil {
		return nil, fmt.Errorf("last message on %s: %w", subject, err)
	}
	// A stored message comes with its Nats-Sequence; a status never does.
	if len(r.Header.Values(jetstream.SequenceHeader)) == 0 {
		if status := r.Header.Get("Status"); status != "404" {
			return nil, fmt.Errorf("last message on %s: direct get: status %s %s", subject, status, r.Header.Get("Description"))
		}
		return nil, fmt.Errorf("last message on %s: %w", subject, jetstream.ErrMsgNotFound)
	}
	m, err := storedOf(r, singleHeaders)
	if err != nil {
		return nil, fmt.Errorf("last message on %s: %w", subject, err)
	}
	return m, nil
}

// LeaderLast is the newest message stored on subject in stream, as the
// stream's leader says; jetstream.ErrMsgNotFound if there is none. subject
// may hold wildcards (a job's subjects): the server finds the last message
// by its index of subjects, in the block that holds it, however long the
// log. A direct get is answered by any replica, and one that
// lags answers with an older message on the subject, or none: for a reader
// that must see what was written last (a projection's own store, read
// right after another instance wrote it), the leader's answer is the one
// that counts.
func LeaderLast(ctx context.Context, js jetstream.JetStream, stream, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := leaderGet(ctx, js, stream, map[string]string{"last_by_subj": subject})
	if err != nil {
		return nil, fmt.Errorf("last message on %s: %w", subject, err)
	}
	return m, nil
}

// LeaderNext is the first message of stream at or after sequence seq on
// filter (which may hold wildcards), as the stream's leader says;
// jetstream.ErrMsgNotFound if there is none. One message a request, where
// a batch would go faster: the server answers a batched direct get, and
// makes a consumer, by first counting every message on the filter after
// seq, which in a bucket (one message a key) walks every key the filter
// matches. Walking a bucket's keys a batch at a time then costs the
// server the whole bucket per batch; one at a time, from where the last
// one was, it costs what lies between the two.
func LeaderNext(ctx context.Context, js jetstream.JetStream, stream, filter string, seq uint64) (*jetstream.RawStreamMsg, error) {
	m, err := leaderGet(ctx, js, stream, map[string]any{"seq": seq, "next_by_subj": filter})
	if err != nil {
		return nil, fmt.Errorf("next message on %s from #%d: %w", filter, seq, err)
	}
	return m, nil
}

// Stepper reads the messages of a stream on a filter one at a time, each
// from where the last was: a walk over a bucket's keys (see LeaderNext for
// why not a batch). Each step is a direct get, which is not queued behind
// the server's other API requests and comes back as the message itself,
// where LeaderNext's answer is JSON with the message in base64: half the
// cost of a step, for both. A direct get may be answered by any replica,
// and one that lags holds only a first part of the stream: a message it
// finds is there, in its place, but one it does not find may be past its
// end, so "none" is asked again of the leader.
type Stepper struct {
	ctx    context.Context
	js     jetstream.JetStream
	stream string
	g      *getter
}

// NewStepper is a Stepper over stream until ctx ends or Close.
func NewStepper(ctx context.Context, js jetstream.JetStream, stream string) (*Stepper, error) {
	g, err := newGetter(ctx, js, stream, 1)
	if err != nil {
		return nil, fmt.Errorf("bus: read %s: %w", stream, err)
	}
	return &Stepper{ctx: ctx, js: js, stream: stream, g: g}, nil
}

// Next is the first message at or after seq on filter (which may hold
// wildcards); jetstream.ErrMsgNotFound if the leader has none.
func (s *Stepper) Next(filter string, seq uint64) (*jetstream.RawStreamMsg, error) {
	m, err := s.g.one(filter, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return LeaderNext(s.ctx, s.js, s.stream, filter, seq)
	}
	if err != nil {
		return nil, fmt.Errorf("next message on %s from #%d: %w", filter, seq, err)
	}
	return m, nil
}

// Close ends the Stepper's subscription.
func (s *Stepper) Close() { s.g.close() }

// leaderGet is the message of stream that req (a STREAM.MSG.GET request)
// asks for, as the stream's leader has it, headers decoded;
// jetstream.ErrMsgNotFound if there is none.
func leaderGet(ctx context.Context, js jetstream.JetStream, stream string, req any) (*jetstream.RawStreamMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, directWait)
		defer cancel()
	}
	r, err := js.Conn().RequestWithContext(ctx, APIPrefix(js.Options())+"STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return nil, err
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, errors.New("no message in the answer")
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, err
		}
	}
	return m, nil
}
