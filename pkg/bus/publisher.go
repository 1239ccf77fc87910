package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/trace"
)

// ErrConflict means a job's log moved on since the sequence an append
// expected: something else happened to the job in between.
var ErrConflict = errors.New("bus: the job's log has moved on")

// ErrClosed is returned by a Publisher or Subscriber used after Close.
var ErrClosed = errors.New("bus: closed")

// Publisher appends to JetStream. It implements watermill's
// message.Publisher (the topic is the NATS subject and the message UUID the
// Nats-Msg-Id), and Append records typed events. It is safe for concurrent use.
type Publisher struct {
	js     jetstream.JetStream
	source string
	now    func() time.Time

	mu     sync.RWMutex
	closed bool
}

// NewPublisher returns a Publisher that stamps events with source (the
// CloudEvents source, e.g. "e31/rent/host-1") and the time now gives.
func NewPublisher(js jetstream.JetStream, source string, now func() time.Time) *Publisher {
	if now == nil {
		now = time.Now
	}
	return &Publisher{js: js, source: source, now: now}
}

// HeaderUUID carries a watermill message's UUID. Watermill treats a UUID as
// unique within a topic, so Publish scopes the Nats-Msg-Id to the topic;
// events appended with Append use their event id, which names its job.
const HeaderUUID = "e31-uuid"

// Publish stores every message on topic with its metadata as headers. A
// message published twice on the same topic with the same UUID is stored
// once. It returns when all are stored.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		nm := nats.NewMsg(topic)
		nm.Data = m.Payload
		for k, v := range m.Metadata {
			nm.Header.Set(k, v)
		}
		nm.Header.Set(HeaderUUID, m.UUID)
		nm.Header.Set(nats.MsgIdHdr, topic+" "+m.UUID)
		f, err := p.js.PublishMsgAsync(nm)
		if err != nil {
			return fmt.Errorf("publish %s to %s: %w", m.UUID, topic, err)
		}
		futures = append(futures, f)
	}
	var errs []error
	for i, err := range AwaitAcks(context.Background(), futures, ackWait) {
		if err != nil {
			errs = append(errs, fmt.Errorf("publish %s to %s: %w", msgs[i].UUID, topic, err))
		}
	}
	return errors.Join(errs...)
}

// ackWait is how long AwaitAcks' callers here give asynchronous publishes
// to be stored.
const ackWait = 30 * time.Second

// ErrNoAck is a publish the server did not acknowledge in time: whether it
// was stored is not known.
var ErrNoAck = errors.New("bus: no acknowledgement in time")

// AwaitAcks waits for the asynchronous publishes futures to be stored, for
// at most wait in all, and gives each one's error: nil once stored, the
// server's refusal, ErrNoAck for those still waiting when wait is over,
// ctx's error for those still waiting when it ends. A nil future is
// skipped (its publish failed at once), its error nil.
func AwaitAcks(ctx context.Context, futures []jetstream.PubAckFuture, wait time.Duration) []error {
	errs := make([]error, len(futures))
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = err
		case <-timeout.C:
			for j := i; j < len(futures); j++ {
				if futures[j] != nil {
					errs[j] = fmt.Errorf("%w (%s)", ErrNoAck, wait)
				}
			}
			return errs
		case <-ctx.Done():
			for j := i; j < len(futures); j++ {
				if futures[j] != nil {
					errs[j] = ctx.Err()
				}
			}
			return errs
		}
	}
	return errs
}

// Close stops the Publisher; later calls fail with ErrClosed.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

// Source is the CloudEvents source this Publisher stamps.
func (p *Publisher) Source() string { return p.source }

// Now is the Publisher's clock.
func (p *Publisher) Now() time.Time { return p.now() }

// AppendOption changes how one event is appended.
type AppendOption func(*appendOpts)

type appendOpts struct {
	expect    uint64
	hasExpect bool
}

// ExpectLast appends only if seq is still the last sequence among the job's
// events (zero: the job has no events yet). Otherwise Append fails with
// ErrConflict and nothing is stored.
func ExpectLast(seq uint64) AppendOption {
	return func(o *appendOpts) { o.expect, o.hasExpect = seq, true }
}

// Append records ev about subject (a job or node id) and returns it as stored.
// A duplicate of an event already stored returns the stored one's sequence;
// with ExpectLast, it is ErrConflict, as a moved-on log is. The event
// carries the trace context of ctx's span (the handling of the event that
// caused it): that is how one trace follows a job through every step.
func (p *Publisher) Append(ctx context.Context, subject string, ev events.Event, opts ...AppendOption) (events.Envelope, error) {
	env := events.New(subject, ev, p.source, p.now())
	env.Trace = trace.Of(ctx)
	return p.AppendEnvelope(ctx, env, opts...)
}

// AppendEnvelope records a prepared envelope; see Append.
func (p *Publisher) AppendEnvelope(ctx context.Context, env events.Envelope, opts ...AppendOption) (events.Envelope, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return env, ErrClosed
	}
	var o appendOpts
	for _, opt := range opts {
		opt(&o)
	}
	m, err := env.Msg()
	if err != nil {
		return env, err
	}
	env.NATSSubject = m.Subject
	var popts []jetstream.PublishOpt
	if o.hasExpect {
		popts = append(popts, jetstream.WithExpectLastSequenceForSubject(o.expect, events.JobSubject(env.Subject)))
	}
	ack, err := p.js.PublishMsg(ctx, m, popts...)
	if err == nil && ack.Duplicate {
		ack, err = p.unlessForged(ctx, m, ack, popts)
	}
	if err != nil {
		if isWrongLastSequence(err) {
			return env, fmt.Errorf("append %s after #%d: %w", env.ID, o.expect, ErrConflict)
		}
		return env, fmt.Errorf("append %s: %w", env.ID, err)
	}
	// A duplicate is a conflict when the append expected a last sequence:
	// the expectation says "only if nothing happened since", and the
	// duplicate was stored earlier, so something did. A lone server checks
	// the expectation before it looks for duplicates and answers with a
	// wrong last sequence; a clustered stream looks for duplicates first
	// and acknowledges the repeat (nats-server 2.15,
	// checkMsgHeadersPreClusteredProposal). Taken as success, a repeated
	// RunStarted would let a node run an attempt a second time; taken as a
	// conflict, the step reads what happened and decides again, on one
	// server or three.
	if ack.Duplicate && o.hasExpect {
		return env, fmt.Errorf("append %s after #%d: already stored at #%d: %w", env.ID, o.expect, ack.Sequence, ErrConflict)
	}
	env.Seq = ack.Sequence
	return env, nil
}

// unlessForged checks that a duplicate the server reported is the event
// itself, stored before on its own subject, and stores the event if it is
// not. The server's duplicate window is per stream, not per subject, and a
// tenant may publish on its own tail of any job's subjects with any
// Nats-Msg-Id: one that names an event a service is yet to append (ids are
// deterministic, <job>/held/1) would otherwise keep that event out of the
// log for the whole window, and again each time it is published. The
// forgery is in the log on the tenant's subject, where no reader takes it
// for the event. The event is then stored without a Nats-Msg-Id: with an
// expected sequence, that expectation is what keeps a retry from storing it
// twice; without one, a retry may.
func (p *Publisher) unlessForged(ctx context.Context, m *nats.Msg, ack *jetstream.PubAck, popts []jetstream.PublishOpt) (*jetstream.PubAck, error) {
	subject, err := p.subjectAt(ctx, ack.Sequence)
	if err != nil {
		return nil, fmt.Errorf("check the duplicate at #%d: %w", ack.Sequence, err)
	}
	if subject == m.Subject {
		return ack, nil
	}
	again := nats.NewMsg(m.Subject)
	again.Data = m.Data
	for k, vs := range m.Header {
		if k != nats.MsgIdHdr {
			again.Header[k] = vs
		}
	}
	return p.js.PublishMsg(ctx, again, popts...)
}

// subjectAt is the subject of the message stored at seq, as the stream's
// leader says: a direct get may be answered by a replica that has not
// stored it yet, and a real duplicate taken for a forgery would be stored
// twice.
func (p *Publisher) subjectAt(ctx context.Context, seq uint64) (string, error) {
	m, err := leaderGet(ctx, p.js, events.Stream, map[string]uint64{"seq": seq})
	if err != nil {
		return "", err
	}
	return m.Subject, nil
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}

// Pending is one event of a batch.
type Pending struct {
	Subject string
	Event   events.Event
	// Expect, when non-zero or ExpectSet, is the job's expected last sequence.
	Expect    uint64
	ExpectSet bool
	// Trace is the trace context the event carries: a batch decides for
	// many jobs, each in its own trace (trace.Of of the span that decided).
	Trace events.Trace
}

// AppendBatch appends events about different jobs with one round trip for
// the lot rather than one each. Results are in order; each has its own error
// (ErrConflict for a failed expectation). Two events of the same job in one
// batch must not both carry an expectation.
func (p *Publisher) AppendBatch(ctx context.Context, batch []Pending) ([]events.Envelope, []error) {
	envs := make([]events.Envelope, len(batch))
	errs := make([]error, len(batch))
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		for i := range errs {
			errs[i] = ErrClosed
		}
		return envs, errs
	}
	futures := make([]jetstream.PubAckFuture, len(batch))
	for i, b := range batch {
		envs[i] = events.New(b.Subject, b.Event, p.source, p.now())
		envs[i].Trace = b.Trace
		m, err := envs[i].Msg()
		if err != nil {
			errs[i] = err
			continue
		}
		envs[i].NATSSubject = m.Subject
		var popts []jetstream.PublishOpt
		if b.ExpectSet {
			popts = append(popts, jetstream.WithExpectLastSequenceForSubject(b.Expect, events.JobSubject(b.Subject)))
		}
		futures[i], errs[i] = p.js.PublishMsgAsync(m, popts...)
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				var popts []jetstream.PublishOpt
				if batch[i].ExpectSet {
					popts = append(popts, jetstream.WithExpectLastSequenceForSubject(batch[i].Expect, events.JobSubject(batch[i].Subject)))
				}
				var err error
				if ack, err = p.unlessForged(ctx, f.Msg(), ack, popts); err != nil {
					if isWrongLastSequence(err) {
						err = ErrConflict
					}
					errs[i] = fmt.Errorf("append %s: %w", envs[i].ID, err)
					continue
				}
			}
			// As in AppendEnvelope: a duplicate is not an append after
			// the expected sequence.
			if ack.Duplicate && batch[i].ExpectSet {
				errs[i] = fmt.Errorf("append %s: already stored at #%d: %w", envs[i].ID, ack.Sequence, ErrConflict)
				continue
			}
			envs[i].Seq = ack.Sequence
		case err := <-f.Err():
			if isWrongLastSequence(err) {
				errs[i] = fmt.Errorf("append %s: %w", envs[i].ID, ErrConflict)
			} else {
				errs[i] = fmt.Errorf("append %s: %w", envs[i].ID, err)
			}
		case <-ctx.Done():
			errs[i] = fmt.Errorf("append %s: %w", envs[i].ID, ctx.Err())
		}
	}
	return envs, errs
}
