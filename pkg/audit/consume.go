package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// How the audit pulls the log: pullBatch messages a request, at most two
// requests outstanding, so that the server fills the next batch while the
// audit takes the last one in, and no more: what is in flight is held in
// memory.
const (
	pullBatch = 1024
	// pullExpires is how long one pull request waits on the server; a
	// request the log cannot fill ends with a 408 that says how much was
	// left unfilled.
	pullExpires = 30 * time.Second
	// pullStall is how long the audit waits for a message before it gives
	// up on the server.
	pullStall = 40 * time.Second
	// pullRestarts bounds how often a consumer that skipped messages (a
	// leader change in a cluster) is made again from where it stopped.
	pullRestarts = 5
)

// errSkipped is a consumer that did not deliver in order: the read goes
// on from the last message taken, with a new consumer.
var errSkipped = errors.New("audit: the consumer skipped messages")

// readLog hands every stored message of the log, from #1 to #last, to emit
// in stream order, exactly as stored.
//
// It reads with an ephemeral pull consumer (acks none, in memory, gone
// once idle: what the auditor is allowed) and takes the messages off its
// own inbox, not through nats.go's consumers. Those take a stored message
// with an empty body and a Status header for a status of their own and
// never hand it over, and any tenant can store one; here a stored message
// is told from a server's status by its reply subject ($JS.ACK…, which a
// status never has). A consumer, not batched direct gets: the server
// answers a direct get by rewriting each message's headers to add where it
// was stored, which cost more than all of the audit's own work.
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

// pullRequest is the JSON of a pull request ($JS.API.CONSUMER.MSG.NEXT).
type pullRequest struct {
	Batch   int           `json:"batch"`
	Expires time.Duration `json:"expires"`
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
		InactiveThreshold: 2 * pullExpires,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		return from, fmt.Errorf("read %s from #%d: %w", what.name, from, err)
	}
	if cons.CachedInfo().NumPending == 0 {
		return from, nil // nothing from there on
	}
	nc := js.Conn()
	// A channel subscription, not NextMsg, which turns an empty message
	// with a 503 Status header into an error and drops it. A channel that
	// is full drops what comes; this one has room for every message the
	// pulls outstanding can bring, and a message dropped all the same
	// shows as a gap in the consumer's sequence, read again (errSkipped).
	in := make(chan *nats.Msg, 2*pullBatch+64)
	sub, err := nc.ChanSubscribe(nc.NewInbox(), in)
	if err != nil {
		return from, fmt.Errorf("read %s: %w", what.name, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	next := apiPrefix(js.Options()) + "CONSUMER.MSG.NEXT." + what.stream + "." + cons.CachedInfo().Name
	req, err := json.Marshal(pullRequest{Batch: pullBatch, Expires: pullExpires})
	if err != nil {
		return from, err
	}
	outstanding := 0
	pull := func() error {
		if err := nc.PublishRequest(next, sub.Subject, req); err != nil {
			return fmt.Errorf("read %s from #%d: %w", what.name, from, err)
		}
		outstanding += pullBatch
		return nil
	}
	stall := time.NewTimer(pullStall)
	defer stall.Stop()
	seq, cseq := from, uint64(0) // the next stream sequence, the last consumer one
	for seq <= last {
		for outstanding <= pullBatch {
			if err := pull(); err != nil {
				return seq, err
			}
		}
		var m *nats.Msg
		select {
		case m = <-in:
		case <-ctx.Done():
			return seq, ctx.Err()
		case <-stall.C:
			return seq, fmt.Errorf("read %s: nothing came for %s after #%d", what.name, pullStall, seq-1)
		}
		if !strings.HasPrefix(m.Reply, "$JS.ACK.") {
			// The server's word about a pull, never a stored message.
			switch status := m.Header.Get("Status"); status {
			case "408", "404": // a request expired, or found nothing
				left, _ := strconv.Atoi(m.Header.Get("Nats-Pending-Messages"))
				outstanding -= min(max(left, 0), outstanding)
				if status == "404" {
					return seq, nil // nothing after seq: the log is shorter than last
				}
			case "100": // a heartbeat
			default:
				return seq, fmt.Errorf("%w: status %s %s after #%d", errSkipped, status, m.Header.Get("Description"), seq-1)
			}
			continue
		}
		s, c, pending, ok := delivered(m.Reply)
		if !ok {
			return seq, fmt.Errorf("read %s after #%d: a message delivered with the reply %q", what.name, seq-1, m.Reply)
		}
		if c != cseq+1 {
			return seq, fmt.Errorf("%w: #%d of the consumer after #%d", errSkipped, c, cseq)
		}
		cseq = c
		outstanding--
		stall.Reset(pullStall)
		if s > last {
			break
		}
		if err := emit(Raw{Seq: s, Subject: m.Subject, Headers: m.Header, Body: m.Data}); err != nil {
			return seq, err
		}
		seq = s + 1
		if pending == 0 {
			break
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
func delivered(reply string) (stream, consumer, pending uint64, ok bool) {
	var tok [12]string
	n := strings.Count(reply, ".") + 1
	if n > len(tok) {
		return 0, 0, 0, false
	}
	rest := reply
	for i := range n {
		tok[i], rest, _ = strings.Cut(rest, ".")
	}
	var at int // where the stream sequence is
	switch {
	case n == 9:
		at = 5
	case n == 11 || n == 12:
		at = 7
	default:
		return 0, 0, 0, false
	}
	var err1, err2, err3 error
	stream, err1 = strconv.ParseUint(tok[at], 10, 64)
	consumer, err2 = strconv.ParseUint(tok[at+1], 10, 64)
	pending, err3 = strconv.ParseUint(tok[at+3], 10, 64)
	return stream, consumer, pending, err1 == nil && err2 == nil && err3 == nil
}

// apiPrefix is where the JetStream API is for js, with its final dot.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}
