package bus

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/retry"
)

// Metadata keys the Subscriber sets on every message, beside the NATS headers.
const (
	// MetaSeq is the stream sequence of the message.
	MetaSeq = "e31-seq"
	// MetaSubject is the NATS subject the message was stored under.
	MetaSubject = "e31-subject"
	// MetaDelivered is how often the message has been delivered, from 1.
	MetaDelivered = "e31-delivered"
	// MetaTerminate, set by a handler before it fails, makes the Subscriber
	// terminate the message (never redeliver it) with the value as reason.
	MetaTerminate = "e31-terminate"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Stream to consume; default events.Stream.
	Stream string
	// Durable names the consumer group: instances that share it share the
	// work. The consumer for a topic is named Durable plus the topic.
	Durable string
	// Lanes > 0 hands over messages with the same Key in order, one at a time,
	// Lanes keys at once; 1 keeps the whole topic in stream order. 0 hands
	// every message over as it comes, up to MaxAckPending at once.
	Lanes int
	// Key picks the ordering key from a subject; default: the job id token.
	Key func(subject string) string
	// AckWait is how long the server waits for an ack before redelivering.
	// While a handler runs, the Subscriber tells the server it is still working
	// every AckWait/3, so a handler may run as long as the job it runs.
	AckWait time.Duration
	// MaxAckPending bounds the messages handed over and not yet acked.
	MaxAckPending int
	// Backoff is the redelivery delay after a failure: the n-th failure waits
	// Backoff[n-1], the last entry repeating. Redelivery never gives up: a
	// message that can never succeed is poison and is terminated instead.
	Backoff []time.Duration
	// DeliverNew starts a new consumer at the end of the stream instead of the
	// beginning.
	DeliverNew bool
	// InactiveThreshold, when set, lets the server remove the durable consumer
	// after that long without a subscriber: for consumers named after one
	// instance of a service, which may never come back.
	InactiveThreshold time.Duration
	// StartSeq, when set, starts a consumer that does not exist yet at that
	// stream sequence: a projection that has just rebuilt itself from the
	// log need not read it all again. An existing consumer goes on from
	// where it was.
	StartSeq uint64
	// Drain is how long, once the subscriber stops, it still waits for the
	// handlers it handed messages to, to settle them. Default AckWait.
	Drain time.Duration
	// Logger for problems the Subscriber cannot return; default slog.Default().
	Logger *slog.Logger
	// Make, if set, makes (or updates) the durable consumer in the
	// Subscriber's stead, which then only reads it: for a reader that may
	// not make consumers itself (a run node asks the node gate, pkg/gate).
	Make func(ctx context.Context, stream string, cc jetstream.ConsumerConfig) error
}

// Subscriber implements watermill's message.Subscriber over durable pull
// consumers. Each Subscribe creates or reuses the durable consumer for its
// topic, which is one or more subject filters separated by spaces.
type Subscriber struct {
	js  jetstream.JetStream
	cfg SubscriberConfig

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
	failed  chan error
}

// NewSubscriber checks cfg and returns a Subscriber.
func NewSubscriber(js jetstream.JetStream, cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.Durable == "" {
		return nil, errors.New("bus: SubscriberConfig.Durable is required")
	}
	if strings.ContainsAny(cfg.Durable, ".*> \t") {
		return nil, fmt.Errorf("bus: durable %q may not contain '.', '*', '>' or spaces", cfg.Durable)
	}
	if cfg.Stream == "" {
		cfg.Stream = events.Stream
	}
	if cfg.Key == nil {
		cfg.Key = JobKey
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.Drain <= 0 {
		cfg.Drain = cfg.AckWait
	}
	if cfg.MaxAckPending <= 0 {
		cfg.MaxAckPending = 1000
	}
	if cfg.Lanes > cfg.MaxAckPending {
		cfg.Lanes = cfg.MaxAckPending
	}
	if len(cfg.Backoff) == 0 {
		cfg.Backoff = []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second, 30 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Subscriber{js: js, cfg: cfg, closing: make(chan struct{}), failed: make(chan error, 1)}, nil
}

// JobKey is the job a subject is about (events.JobOf: a job's event, its
// timer), else the subject itself.
func JobKey(subject string) string {
	if job := events.JobOf(subject); job != "" {
		return job
	}
	return subject
}

// ConsumerName is the durable consumer a Subscriber with durable uses for
// topic (events.ConsumerName, where the permissions of a node's consumers
// read it too).
func ConsumerName(durable, topic string) string { return events.ConsumerName(durable, topic) }

// Subscribe starts consuming topic. The channel closes when ctx is done or
// the Subscriber is closed; an unacked message is then redelivered later.
//
// If the durable consumer disappears while it is consumed (an operator
// deleted it), the Subscriber makes it again, starting at the first message
// it had not settled, so nothing is skipped; if it cannot, it reports why on
// Failed and closes the channel.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()

	filters := strings.Fields(topic)
	if len(filters) == 0 {
		s.wg.Done()
		return nil, errors.New("bus: empty topic")
	}
	cc := jetstream.ConsumerConfig{
		Durable:           ConsumerName(s.cfg.Durable, topic),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           s.cfg.AckWait,
		MaxDeliver:        -1,
		MaxAckPending:     s.cfg.MaxAckPending,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: s.cfg.InactiveThreshold,
	}
	if s.cfg.DeliverNew {
		cc.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	if len(filters) == 1 {
		cc.FilterSubject = filters[0]
	} else {
		cc.FilterSubjects = filters
	}
	cons, err := s.consumer(ctx, cc)
	if err != nil && ctx.Err() != nil {
		// Stopped while subscribing: nothing to hand over, as after any
		// stop. (An error here would leave watermill's Router waiting for
		// a handler that never started.)
		s.wg.Done()
		out := make(chan *message.Message)
		close(out)
		return out, nil
	}
	if err != nil {
		s.wg.Done()
		return nil, fmt.Errorf("bus: consumer %s on %s: %w", cc.Durable, s.cfg.Stream, err)
	}
	sub := &subscription{cc: cc, unsettled: map[uint64]int{}}
	iter, err := sub.consume(s.js, cons, s.cfg.MaxAckPending)
	if err != nil {
		s.wg.Done()
		return nil, fmt.Errorf("bus: consume %s: %w", cc.Durable, err)
	}

	ctx, cancel := context.WithCancel(ctx)
	out := make(chan *message.Message)
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	go func() {
		defer s.wg.Done()
		defer cancel()
		stop := context.AfterFunc(ctx, sub.stop)
		defer func() { stop(); sub.stop() }()
		s.run(ctx, sub, iter, out)
	}()
	return out, nil
}

// subscription is one topic's durable consumer as it is consumed: which
// messages it handed out and has not settled, so that a consumer that
// disappears can be made again from the first of them.
type subscription struct {
	cc jetstream.ConsumerConfig

	mu        sync.Mutex
	iter      deliveries
	stopped   bool
	delivered uint64         // the highest stream sequence handed out
	unsettled map[uint64]int // handed out, not yet acked or terminated
}

// consume starts pulling from cons, unless the subscription has stopped.
func (sub *subscription) consume(js jetstream.JetStream, cons jetstream.Consumer, maxAckPending int) (deliveries, error) {
	p, err := NewPull(context.Background(), js, cons, min(maxAckPending, 256))
	if err != nil {
		return nil, err
	}
	iter := pulls{p}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.iter = iter
	if sub.stopped {
		iter.Stop()
	}
	return iter, nil
}

// stop ends the pulling, whichever consumer it is from.
func (sub *subscription) stop() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.stopped = true
	if sub.iter != nil {
		sub.iter.Stop()
	}
}

// handedOut notes that the message at seq is being handled.
func (sub *subscription) handedOut(seq uint64) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.unsettled[seq]++
	sub.delivered = max(sub.delivered, seq)
}

// settled notes that the message at seq is acked or terminated: a consumer
// made again need not deliver it again.
func (sub *subscription) settled(seq uint64) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	delete(sub.unsettled, seq)
}

// resumeAt is where a consumer made again must start so that it skips
// nothing that was not settled; 0 if nothing was handed out yet.
func (sub *subscription) resumeAt() uint64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.delivered == 0 {
		return 0
	}
	start := sub.delivered + 1
	for seq := range sub.unsettled {
		start = min(start, seq)
	}
	return start
}

// Failed reports, once, why a subscription of this Subscriber ended before
// it was closed: its consumer disappeared and could not be made again.
func (s *Subscriber) Failed() <-chan error { return s.failed }

func (s *Subscriber) fail(err error) {
	select {
	case s.failed <- err:
	default:
	}
}

// gone reports whether a pull that went unanswered (no heartbeat) is
// unanswered because the consumer, or its stream, is no more: the server
// does not always tell the pulls waiting on a consumer it deletes.
func (s *Subscriber) gone(ctx context.Context, sub *subscription, err error) bool {
	if !errors.Is(err, jetstream.ErrNoHeartbeat) {
		return false
	}
	_, err = s.js.Consumer(ctx, s.cfg.Stream, sub.cc.Durable)
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// reconsume makes the subscription's consumer again after it disappeared
// and starts pulling from it. Another instance sharing the durable may have
// made it first: then that one is used as it is.
func (s *Subscriber) reconsume(ctx context.Context, sub *subscription) (deliveries, error) {
	cc := sub.cc
	start := sub.resumeAt()
	cons, err := retry.Value(ctx, retry.Consumer, func() (jetstream.Consumer, error) {
		if start == 0 {
			return s.createConsumer(ctx, cc)
		}
		cons, err := s.js.Consumer(ctx, s.cfg.Stream, cc.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
			if s.cfg.Make != nil {
				return s.made(ctx, cc)
			}
			return s.js.CreateConsumer(ctx, s.cfg.Stream, cc)
		}
		return cons, err
	}, retry.If(func(err error) bool { return retry.Transient(err) || errors.Is(err, jetstream.ErrConsumerExists) }))
	if err != nil {
		return nil, fmt.Errorf("bus: make the deleted consumer %s again: %w", cc.Durable, err)
	}
	s.cfg.Logger.Warn("bus: the consumer was deleted; it is made again", "durable", cc.Durable, "from", start)
	return sub.consume(s.js, cons, s.cfg.MaxAckPending)
}

// consumer creates (or finds, and updates) the durable consumer cc. It
// tries again while the failure is one that passes: a server that is
// restarting, or a cluster electing a leader, must not stop a service that
// is starting, or that subscribes while it happens. Closing the Subscriber
// ends the trying.
func (s *Subscriber) consumer(ctx context.Context, cc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-s.closing:
			cancel(ErrClosed)
		case <-ctx.Done():
		}
	}()
	defer func() { cancel(nil); <-watched }()
	return retry.Value(ctx, retry.Consumer, func() (jetstream.Consumer, error) { return s.createConsumer(ctx, cc) },
		retry.OnRetry(func(err error, in time.Duration) {
			s.cfg.Logger.Warn("bus: creating the consumer failed; trying again", "durable", cc.Durable, "in", in, "err", err)
		}))
}

func (s *Subscriber) createConsumer(ctx context.Context, cc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if s.cfg.StartSeq > 1 {
		if existing, err := s.js.Consumer(ctx, s.cfg.Stream, cc.Durable); err == nil {
			cc.DeliverPolicy, cc.OptStartSeq = existing.CachedInfo().Config.DeliverPolicy, existing.CachedInfo().Config.OptStartSeq
		} else if errors.Is(err, jetstream.ErrConsumerNotFound) {
			cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, s.cfg.StartSeq
		} else {
			return nil, err
		}
	}
	if s.cfg.Make != nil {
		return s.made(ctx, cc)
	}
	return s.js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, cc)
}

// made has Make make cc, and reads it.
func (s *Subscriber) made(ctx context.Context, cc jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if err := s.cfg.Make(ctx, s.cfg.Stream, cc); err != nil {
		return nil, err
	}
	return s.js.Consumer(ctx, s.cfg.Stream, cc.Durable)
}

// run pulls messages and hands them to lanes (or straight out) until ctx ends.
func (s *Subscriber) run(ctx context.Context, sub *subscription, iter deliveries, out chan<- *message.Message) {
	var handlers sync.WaitGroup
	defer func() {
		handlers.Wait()
		close(out)
	}()
	var lanes []chan delivery
	if s.cfg.Lanes > 0 {
		lanes = make([]chan delivery, s.cfg.Lanes)
		for i := range lanes {
			lanes[i] = make(chan delivery, 64)
			handlers.Add(1)
			go func(in <-chan delivery) {
				defer handlers.Done()
				for {
					select {
					case <-ctx.Done():
						return
					case m, ok := <-in:
						if !ok {
							return
						}
						s.deliver(ctx, sub, m, out)
					}
				}
			}(lanes[i])
		}
	}
	for {
		m, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrMsgIteratorClosed) || s.gone(ctx, sub, err) {
				// Nobody stopped it: the consumer is gone (deleted with the
				// JetStream API, or its stream was). Without it nothing more
				// would ever come: make it again, or say why not.
				iter.Stop()
				if iter, err = s.reconsume(ctx, sub); err != nil {
					if ctx.Err() == nil {
						s.cfg.Logger.Error("bus: the consumer was deleted and cannot be made again", "durable", sub.cc.Durable, "err", err)
						s.fail(err)
					}
					return
				}
				continue
			}
			s.cfg.Logger.Warn("bus: pulling messages", "durable", s.cfg.Durable, "err", err)
			continue
		}
		if lanes == nil {
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				s.deliver(ctx, sub, m, out)
			}()
			continue
		}
		h := fnv.New32a()
		h.Write([]byte(s.cfg.Key(m.Subject())))
		select {
		case lanes[h.Sum32()%uint32(len(lanes))] <- m:
		case <-ctx.Done():
			return
		}
	}
}

// deliver hands one message to the Router and settles it with the server
// according to what the handler did.
func (s *Subscriber) deliver(ctx context.Context, sub *subscription, m delivery, out chan<- *message.Message) {
	wm := toWatermill(m)
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	sub.handedOut(seq)
	msgCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	wm.SetContext(msgCtx)
	select {
	case out <- wm:
	case <-ctx.Done():
		return // not acked: the server redelivers it
	}
	tick := time.NewTicker(max(s.cfg.AckWait/3, 10*time.Millisecond))
	defer tick.Stop()
	// On shutdown the Router waits for running handlers; settle what they
	// decide, so that a message is not left to its ack wait for nothing.
	var draining <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case <-wm.Acked():
			if err := m.Ack(); err != nil {
				s.cfg.Logger.Warn("bus: ack", "msg", wm.UUID, "err", err)
			}
			sub.settled(seq)
			return
		case <-wm.Nacked():
			if reason := wm.Metadata.Get(MetaTerminate); reason != "" {
				if err := m.TermWithReason(reason); err != nil {
					s.cfg.Logger.Warn("bus: term", "msg", wm.UUID, "err", err)
				}
				sub.settled(seq)
				return
			}
			delivered := 1
			if md, err := m.Metadata(); err == nil {
				delivered = int(md.NumDelivered)
			}
			delay := s.cfg.Backoff[min(delivered, len(s.cfg.Backoff))-1]
			if err := m.NakWithDelay(delay); err != nil {
				s.cfg.Logger.Warn("bus: nak", "msg", wm.UUID, "err", err)
			}
			return
		case <-tick.C:
			if err := m.InProgress(); err != nil {
				s.cfg.Logger.Warn("bus: in progress", "msg", wm.UUID, "err", err)
			}
		case <-done:
			done = nil
			draining = time.After(s.cfg.Drain)
		case <-draining:
			return
		}
	}
}

func toWatermill(m delivery) *message.Message {
	h := m.Headers()
	id := h.Get(HeaderUUID)
	if id == "" {
		id = h.Get(events.HeaderID)
	}
	if id == "" {
		id = h.Get(nats.MsgIdHdr)
	}
	wm := message.NewMessage(id, m.Data())
	for k, v := range h {
		if len(v) > 0 {
			wm.Metadata.Set(k, v[0])
		}
	}
	wm.Metadata.Set(MetaSubject, m.Subject())
	if md, err := m.Metadata(); err == nil {
		wm.Metadata.Set(MetaSeq, strconv.FormatUint(md.Sequence.Stream, 10))
		wm.Metadata.Set(MetaDelivered, strconv.FormatUint(md.NumDelivered, 10))
	}
	return wm
}

// Close stops every subscription and waits until their channels are closed.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Envelope decodes the event a Subscriber delivered, with its stream sequence.
func Envelope(m *message.Message) (events.Envelope, error) {
	h := nats.Header{}
	for k, v := range m.Metadata {
		h.Set(k, v)
	}
	env, err := events.Decode(m.Metadata.Get(MetaSubject), h, m.Payload)
	if err != nil {
		return env, err
	}
	env.Seq, _ = strconv.ParseUint(m.Metadata.Get(MetaSeq), 10, 64)
	return env, nil
}
