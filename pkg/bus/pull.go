package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// delivery is one message a consumer delivered, as the Subscriber uses it.
// jetstream.Msg is one; so is pulled.
type delivery interface {
	Subject() string
	Headers() nats.Header
	Data() []byte
	Metadata() (*jetstream.MsgMetadata, error)
	Ack() error
	NakWithDelay(delay time.Duration) error
	InProgress() error
	TermWithReason(reason string) error
}

// deliveries is where a subscription takes its messages from.
type deliveries interface {
	Next() (delivery, error)
	Stop()
}

// pulls are a Pull's messages as the Subscriber takes them.
type pulls struct{ *Pull }

// Next implements deliveries.
func (p pulls) Next() (delivery, error) {
	m, err := p.Pull.Next()
	if m == nil {
		return nil, err
	}
	return pulled{m}, err
}

// Pull pulls a consumer's messages with plain pull requests (ADR-13) rather
// than nats.go's consumer: the one way e31 reads a consumer, for the
// Subscriber's durable consumers, the Follower's and the audit's. nats.go
// tells a stored message from a status of the server's by its body and its
// Status header alone: a stored message with an empty body and a Status
// header, which any tenant may publish on its own tail of a job's subjects,
// is taken for a status and never handed over, and, never acked, it holds
// one of the consumer's MaxAckPending places for ever; a thousand of them
// stop the consumer. A stored message comes with a $JS.ACK reply subject and
// a status never does: Pull tells them apart by that. It is for one
// goroutine, but for Stop.
type Pull struct {
	nc        *nats.Conn
	next      string // $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
	request   []byte
	batch     int
	heartbeat time.Duration

	sub    *nats.Subscription
	in     chan *nats.Msg
	ctx    context.Context // ends with Stop
	cancel context.CancelFunc

	// asked counts the messages the requests made may still bring: once
	// half a batch is left, the next is asked for, so that messages keep
	// coming while the last ones are handled. Only Next touches it.
	asked int
	// silence fires when nothing came for two heartbeats; Next's alone,
	// made by its first call and reset by each (a timer reset needs no
	// draining since Go 1.23).
	silence *time.Timer
}

// pullExpiry is how long one pull request waits for messages; the server
// sends a heartbeat every pullHeartbeat meanwhile, so that a request lost
// with its consumer, its server or the connection is noticed.
const (
	pullExpiry    = 10 * time.Second
	pullHeartbeat = 3 * time.Second
)

// NewPull starts pulling from the consumer cons, batch messages at a
// time, until Stop is called or ctx ends. What it was pulled and has not
// handed over is held in memory: up to one and a half batches.
func NewPull(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, batch int) (*Pull, error) {
	info := cons.CachedInfo()
	req, err := json.Marshal(map[string]any{
		"batch": batch, "expires": pullExpiry.Nanoseconds(), "idle_heartbeat": pullHeartbeat.Nanoseconds(),
	})
	if err != nil {
		return nil, err
	}
	p := &Pull{
		nc: js.Conn(), next: APIPrefix(js.Options()) + "CONSUMER.MSG.NEXT." + info.Stream + "." + info.Name,
		request: req, batch: batch, heartbeat: pullHeartbeat,
	}
	p.ctx, p.cancel = context.WithCancel(ctx)
	p.in = make(chan *nats.Msg, batch)
	// A callback, not NextMsg: NextMsg turns any empty message with a 503
	// Status header into nats.ErrNoResponders and drops it, stored or not.
	p.sub, err = p.nc.Subscribe(p.nc.NewInbox(), func(m *nats.Msg) {
		select {
		case p.in <- m:
		case <-p.ctx.Done():
		}
	})
	if err != nil {
		p.cancel()
		return nil, fmt.Errorf("bus: pull from %s: %w", info.Name, err)
	}
	// A slow handler must not make the client drop what was pulled.
	if err := p.sub.SetPendingLimits(-1, -1); err != nil {
		p.Stop()
		return nil, err
	}
	if err := p.pull(); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// pull asks for the next batch.
func (p *Pull) pull() error {
	p.asked += p.batch
	if err := p.nc.PublishRequest(p.next, p.sub.Subject, p.request); err != nil {
		return fmt.Errorf("bus: pull: %w", err)
	}
	return nil
}

// Next returns the next stored message, exactly as the server sent it
// (its reply subject is its $JS.ACK), and, with it, an error when asking
// for more failed. Without a message, jetstream.ErrConsumerDeleted says
// the server deleted the consumer; jetstream.ErrNoHeartbeat that neither
// messages nor heartbeats came for two heartbeats (a new request is made);
// nats.ErrNoResponders that nobody answers for the consumer's stream;
// jetstream.ErrMsgIteratorClosed that Stop was called or ctx ended.
func (p *Pull) Next() (*nats.Msg, error) {
	// One timer for every call: a projection takes a message at a time.
	if p.silence == nil {
		p.silence = time.NewTimer(2 * p.heartbeat)
	} else {
		p.silence.Reset(2 * p.heartbeat)
	}
	silence := p.silence
	for {
		var m *nats.Msg
		select {
		case <-p.ctx.Done():
			return nil, jetstream.ErrMsgIteratorClosed
		case <-silence.C:
			p.asked = 0 // whatever was asked for is lost
			if err := p.pull(); err != nil {
				return nil, err
			}
			return nil, jetstream.ErrNoHeartbeat
		case m = <-p.in:
			silence.Reset(2 * p.heartbeat)
		}
		if strings.HasPrefix(m.Reply, "$JS.ACK.") {
			p.asked--
			return m, p.more()
		}
		switch m.Header.Get("Status") {
		case "100": // heartbeat
		case "404", "408": // no messages, or the request expired
			p.ended(m)
			if err := p.more(); err != nil {
				return nil, err
			}
		case "409":
			if strings.Contains(strings.ToLower(m.Header.Get("Description")), "consumer deleted") {
				return nil, jetstream.ErrConsumerDeleted
			}
			// The request ended early (max bytes, a new leader, a server
			// shutting down): ask again.
			p.ended(m)
			if err := p.more(); err != nil {
				return nil, err
			}
		case "503":
			// Nobody answers pulls of this consumer: its stream is not
			// there, for now or for good. The silence that follows says
			// which.
			return nil, nats.ErrNoResponders
		default:
			return nil, fmt.Errorf("bus: pull: status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
		}
	}
}

// ended takes what a request that ended will no longer bring off asked.
func (p *Pull) ended(status *nats.Msg) {
	left, err := strconv.Atoi(status.Header.Get("Nats-Pending-Messages"))
	if err != nil {
		left = p.batch
	}
	p.asked = max(p.asked-left, 0)
}

// more asks for the next batch once half of one is left to come.
func (p *Pull) more() error {
	if p.asked > p.batch/2 {
		return nil
	}
	return p.pull()
}

// Stop ends the pulling; Next then returns jetstream.ErrMsgIteratorClosed.
// It is safe to call more than once and from any goroutine.
func (p *Pull) Stop() {
	p.cancel()
	_ = p.sub.Unsubscribe()
}

// pulled is a stored message a pull request brought. Its replies are
// JetStream's acknowledgement protocol, sent to its reply subject.
type pulled struct{ m *nats.Msg }

func (p pulled) Subject() string      { return p.m.Subject }
func (p pulled) Headers() nats.Header { return p.m.Header }
func (p pulled) Data() []byte         { return p.m.Data }

func (p pulled) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := p.m.Metadata()
	if err != nil {
		return nil, err
	}
	out := &jetstream.MsgMetadata{NumDelivered: md.NumDelivered, NumPending: md.NumPending, Timestamp: md.Timestamp,
		Stream: md.Stream, Consumer: md.Consumer, Domain: md.Domain}
	out.Sequence.Stream, out.Sequence.Consumer = md.Sequence.Stream, md.Sequence.Consumer
	return out, nil
}

func (p pulled) Ack() error        { return p.m.Respond([]byte("+ACK")) }
func (p pulled) InProgress() error { return p.m.Respond([]byte("+WPI")) }

func (p pulled) NakWithDelay(delay time.Duration) error {
	return p.m.Respond(fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds()))
}

func (p pulled) TermWithReason(reason string) error {
	return p.m.Respond([]byte("+TERM " + reason))
}
