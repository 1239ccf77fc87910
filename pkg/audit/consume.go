package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// How the audit pulls the log.
const (
	// pullBatch is how many messages a pull request asks for: bus.Pull
	// asks for the next batch once half of one is left to come, so that
	// the server fills it while the audit takes the last one in.
	pullBatch = 1024
	// pullStall is how long the audit waits for a message before it gives
	// up on the server.
	pullStall = 40 * time.Second
	// pullRestarts bounds how often a consumer that skipped messages (a
	// leader change in a cluster) is made again from where it stopped.
	pullRestarts = 5
	// consumerGone is how long the audit waits before it makes a consumer
	// again that nobody answered for: a cluster's server coming back, or a
	// stream's new leader, takes a few seconds.
	consumerGone = 2 * time.Second
)

// errSkipped is a consumer that did not deliver in order: the read goes
// on from the last message taken, with a new consumer.
var errSkipped = errors.New("audit: the consumer skipped messages")

// readLog hands every stored message of the log, from #1 to #last, to emit
// in stream order, exactly as stored.
//
// It reads with an ephemeral pull consumer (acks none, in memory, gone
// once idle: what the auditor is allowed), through bus.Pull, which hands
// over every stored message, one with an empty body and a Status header
// that any tenant can store too. A consumer, not batched direct gets: the
// server answers a direct get by rewriting each message's headers to add
// where it was stored, which cost more than all of the audit's own work.
//
// The pulling is the bus's, as the ledger's is; the checks are the
// audit's own: the consumer's sequence runs on without a gap here (a
// message the pull lost is read again), and the log's from #1 to #last in
// the Auditor (one missing from the log is a finding). A fault of the
// pulling shows as either, never as the audit agreeing with the ledger.
func readLog(ctx context.Context, js jetstream.JetStream, last uint64, emit func(Raw) error) error {
	from := uint64(1)
	for restarts := 0; ; restarts++ {
		next, err := pullFrom(ctx, js, pull{stream: events.Stream, name: "the log"}, from, last, emit)
		if errors.Is(err, errSkipped) && restarts < pullRestarts {
			from = next
			continue
		}
		if err != nil {
			return err
		}
		if next <= last {
			return fmt.Errorf("read the log: it ended at #%d, but held #%d when the audit started", next-1, last)
		}
		return nil
	}
}

// pull says what pullFrom reads: a stream, and the subjects of it (all
// if filter is "").
type pull struct {
	stream, filter string
	name           string // what it is, for errors
}

// pullFrom reads from sequence from up to last with one consumer, and
// returns the sequence after the last message it handed over.
func pullFrom(ctx context.Context, js jetstream.JetStream, what pull, from, last uint64, emit func(Raw) error) (uint64, error) {
	cons, err := js.CreateConsumer(ctx, what.stream, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		FilterSubject:     what.filter,
		AckPolicy:         jetstream.AckNonePolicy,
		ReplayPolicy:      jetstream.ReplayInstantPolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		return from, fmt.Errorf("read %s from #%d: %w", what.name, from, err)
	}
	if cons.CachedInfo().NumPending == 0 {
		return from, nil // nothing from there on
	}
	p, err := bus.NewPull(ctx, js, cons, pullBatch)
	if err != nil {
		return from, fmt.Errorf("read %s from #%d: %w", what.name, from, err)
	}
	defer p.Stop()
	seq, cseq := from, uint64(0) // the next stream sequence, the last consumer one
	lastCame := time.Now()
	for seq <= last {
		m, err := p.Next()
		switch {
		case m != nil:
		case errors.Is(err, jetstream.ErrNoHeartbeat):
			// The server said nothing for two heartbeats, and was asked again.
			if time.Since(lastCame) > pullStall {
				return seq, fmt.Errorf("read %s: nothing came for %s after #%d", what.name, pullStall, seq-1)
			}
			continue
		case ctx.Err() != nil:
			return seq, ctx.Err()
		case errors.Is(err, jetstream.ErrConsumerDeleted):
			return seq, fmt.Errorf("%w: the consumer was deleted after #%d", errSkipped, seq-1)
		case errors.Is(err, nats.ErrNoResponders):
			// Nobody answers for the consumer: the server it lived on went
			// away (one of a cluster restarted, or lost its routes). The
			// cluster test's audit failed so, just after its faults were
			// undone. Made again a while later, from where the reading is,
			// it lives on a server that answers.
			select {
			case <-ctx.Done():
				return seq, ctx.Err()
			case <-time.After(consumerGone):
			}
			return seq, fmt.Errorf("%w: nobody answered for the consumer after #%d", errSkipped, seq-1)
		default:
			return seq, fmt.Errorf("read %s after #%d: %w", what.name, seq-1, err)
		}
		s, c, stored, pending, ok := delivered(m.Reply)
		if !ok {
			return seq, fmt.Errorf("read %s after #%d: a message delivered with the reply %q", what.name, seq-1, m.Reply)
		}
		if c != cseq+1 {
			return seq, fmt.Errorf("%w: #%d of the consumer after #%d", errSkipped, c, cseq)
		}
		cseq, lastCame = c, time.Now()
		if s > last {
			break
		}
		if err := emit(Raw{Seq: s, Subject: m.Subject, Headers: m.Header, Body: m.Data, Stored: stored}); err != nil {
			return seq, err
		}
		seq = s + 1
		if pending == 0 {
			break
		}
		if err != nil {
			// Asking for more failed: the next message would not come.
			return seq, fmt.Errorf("read %s after #%d: %w", what.name, seq-1, err)
		}
	}
	return seq, nil
}

// delivered reads where a message a consumer delivered was stored, from
// its reply subject: its stream and consumer sequences and how many
// messages are pending after it. JetStream writes it in two forms,
// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.
// <time>.<pending> and, with a domain and account,
// $JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<stream
// seq>.<consumer seq>.<time>.<pending>[.<token>]. Read here rather than
// with nats.go's Msg.Metadata, which allocates twice a message.
func delivered(reply string) (stream, consumer uint64, stored time.Time, pending uint64, ok bool) {
	var tok [12]string
	n := strings.Count(reply, ".") + 1
	if n > len(tok) {
		return 0, 0, time.Time{}, 0, false
	}
	rest := reply
	for i := range n {
		tok[i], rest, _ = strings.Cut(rest, ".")
	}
	var at int // where the stream sequence is
	switch n {
	case 9:
		at = 5
	case 11, 12:
		at = 7
	default:
		return 0, 0, time.Time{}, 0, false
	}
	var err1, err2, err3, err4 error
	stream, err1 = strconv.ParseUint(tok[at], 10, 64)
	consumer, err2 = strconv.ParseUint(tok[at+1], 10, 64)
	ns, err4 := strconv.ParseInt(tok[at+2], 10, 64)
	pending, err3 = strconv.ParseUint(tok[at+3], 10, 64)
	return stream, consumer, time.Unix(0, ns), pending, err1 == nil && err2 == nil && err3 == nil && err4 == nil
}
