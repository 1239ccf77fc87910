package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/retry"
)

// Follower reads the event log in order from a sequence on, for ever: what
// nats.go's ordered consumer does, with the pulls of a Pull, so that no
// message a tenant stored can stop it (an ordered consumer that meets an
// empty message with a Status header never hands it over, takes the next
// one for a gap, and starts again before it, for ever). It is for one
// goroutine.
type Follower struct {
	js      jetstream.JetStream
	ctx     context.Context
	filters []string

	p       *Pull
	started bool
	fixed   string // the consumer's name, if the caller chose it
	name    string // of the current consumer
	// retrying, if set, is told each failure to make the consumer again
	// (Retrying).
	retrying func(err error, in time.Duration)
	next     uint64 // the stream sequence to read next
	cseq     uint64 // the consumer sequence of the last message read
	pending  uint64
}

// followInactive is how long an abandoned follower's consumer outlives it.
const followInactive = time.Minute

// followRequest bounds each request the follower makes of the JetStream
// API. nats.go bounds one by its DefaultTimeout only when the context has
// no deadline; a follower's may carry a far one (a test's, a command's
// --timeout), and a request that no server answers (one taken by a server
// killed in a cluster, or sent while the stream's leader is elected) then
// waited for it, the reading stopped meanwhile: the cluster test's
// follower stood still for minutes after a NATS server was killed.
const followRequest = 5 * time.Second

// Follow starts reading the stream's messages on filters (every job and
// node event if none) from sequence from (1 or 0: the first), until ctx
// ends or Stop is called.
func Follow(ctx context.Context, js jetstream.JetStream, filters []string, from uint64) (*Follower, error) {
	return FollowAs(ctx, js, "", filters, from)
}

// FollowAs is Follow on a consumer named name (the server's choice if ""),
// made again under that name whenever it is lost: a consumer whose
// figures (what it has left to read) can be asked of the server by name.
// One left behind by an earlier reader of the same name is replaced.
func FollowAs(ctx context.Context, js jetstream.JetStream, name string, filters []string, from uint64) (*Follower, error) {
	if len(filters) == 0 {
		filters = []string{events.JobSubjects, events.NodeSubjects}
	}
	f := &Follower{js: js, ctx: ctx, filters: filters, fixed: name, next: max(from, 1)}
	if err := f.start(); err != nil {
		return nil, err
	}
	return f, nil
}

// Name is the name of the consumer the follower reads now: the one it was
// given (FollowAs), or that name and a suffix while it cannot be had.
func (f *Follower) Name() string { return f.name }

// Retrying has fn told each time the follower, having lost its consumer,
// fails to make it again, and when it tries next: without it a reading
// that stands still says nothing until it gives up. For before the first
// Next.
func (f *Follower) Retrying(fn func(err error, in time.Duration)) { f.retrying = fn }

// Pending is how many messages there were to read when Follow started.
func (f *Follower) Pending() uint64 { return f.pending }

// start makes a consumer that delivers from f.next on and pulls from it.
func (f *Follower) start() error {
	ctx, cancel := context.WithTimeout(f.ctx, followRequest)
	defer cancel()
	filters, err := f.filtering(ctx)
	if err != nil {
		return fmt.Errorf("bus: follow the log from #%d: %w", f.next, err)
	}
	cfg := jetstream.ConsumerConfig{
		AckPolicy: jetstream.AckNonePolicy, FilterSubjects: filters, DeliverPolicy: jetstream.DeliverAllPolicy,
		InactiveThreshold: followInactive, MemoryStorage: true, Replicas: 1,
	}
	if f.next > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, f.next
	}
	cfg.Name = f.fixed
	cons, err := f.js.CreateConsumer(ctx, events.Stream, cfg)
	if f.fixed != "" && taken(err) {
		// Left behind, reading from elsewhere: replace it. A deletion
		// that fails says why (a timeout, when a server of the cluster
		// was lost), not the conflict it was to resolve.
		if derr := f.js.DeleteConsumer(ctx, events.Stream, f.fixed); derr == nil || errors.Is(derr, jetstream.ErrConsumerNotFound) {
			cons, err = f.js.CreateConsumer(ctx, events.Stream, cfg)
		} else {
			err = fmt.Errorf("replace the consumer %s left behind: %w", f.fixed, derr)
		}
	}
	if f.fixed != "" && err != nil && f.ctx.Err() == nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		// The name cannot be had now. A consumer of one replica lives on
		// one server: while that server is down, the cluster keeps it,
		// answers nothing about it, deletes it not, and may place it
		// there again. The reading must not wait for the server to come
		// back: it goes on under another name (Name says which). Waiting
		// stopped RENT, which decides from what it reads, for as long as
		// a NATS server was down: a minute in the cluster test.
		actx, acancel := context.WithTimeout(f.ctx, followRequest)
		defer acancel()
		cfg.Name = f.fixed + "-" + nuid.Next()
		var aerr error
		if cons, aerr = f.js.CreateConsumer(actx, events.Stream, cfg); aerr != nil {
			err = fmt.Errorf("%w; and under another name: %v", err, aerr)
		} else {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("bus: follow the log from #%d: %w", f.next, err)
	}
	p, err := NewPull(f.ctx, f.js, cons, 1024)
	if err != nil {
		return fmt.Errorf("bus: follow the log from #%d: %w", f.next, err)
	}
	f.p, f.name, f.cseq = p, cons.CachedInfo().Name, 0
	if !f.started {
		f.started, f.pending = true, cons.CachedInfo().NumPending
	}
	return nil
}

// filtering is the filter the consumer is made with: none when f's filters
// are the stream's subjects, every one of them. A consumer with several
// filters has the server match each message's subject against each of
// them, on the server's goroutine that reads the stream for it: in a
// catch-up with the whole log (RENT's and the LEDGER's, on every start) a
// large share of the server's work, to deliver every message anyway. The
// stream's subjects are asked of the server each time a consumer is made,
// so that a stream given more subjects later is filtered again.
func (f *Follower) filtering(ctx context.Context) ([]string, error) {
	st, err := f.js.Stream(ctx, events.Stream)
	if err != nil {
		return nil, err
	}
	if sameSet(st.CachedInfo().Config.Subjects, f.filters) {
		return nil, nil
	}
	return f.filters, nil
}

// sameSet reports whether a and b, neither empty, hold the same strings,
// in any order and however often.
func sameSet(a, b []string) bool {
	within := func(a, b []string) bool {
		return !slices.ContainsFunc(a, func(s string) bool { return !slices.Contains(b, s) })
	}
	return len(a) > 0 && len(b) > 0 && within(a, b) && within(b, a)
}

// taken reports whether err says a consumer of the name asked for exists
// with another configuration.
func taken(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerExists) || errors.Is(err, jetstream.ErrConsumerNameAlreadyInUse)
}

// restart drops the current consumer and makes another from where the
// reading is, trying again while it fails for a reason that passes, and
// for a while while the stream is not found (a restarting cluster).
//
// A name still taken passes too: the consumer left behind under it is
// deleted on the next try, where this one's deletion timed out or raced
// with its making again (a cluster that has just lost a server). Given up
// on, it stopped RENT for good: a standby exited in the cluster test with
// "consumer already exists", and when the leader was killed later nobody
// decided.
func (f *Follower) restart() error {
	f.drop()
	var gone time.Time
	notify := retry.OnRetry(func(err error, in time.Duration) {
		if f.retrying != nil {
			f.retrying(err, in)
		}
	})
	return retry.Do(f.ctx, retry.Consumer, f.start, notify, retry.If(func(err error) bool {
		if taken(err) {
			return true
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return retry.Transient(err)
		}
		if gone.IsZero() {
			gone = time.Now()
		}
		return time.Since(gone) < retry.StreamGone
	}))
}

// drop stops pulling and deletes the consumer, as far as it can: the
// server removes it anyway once it is inactive.
func (f *Follower) drop() {
	if f.p == nil {
		return
	}
	f.p.Stop()
	f.p = nil
	ctx, cancel := context.WithTimeout(context.WithoutCancel(f.ctx), time.Second)
	defer cancel()
	_ = f.js.DeleteConsumer(ctx, events.Stream, f.name)
}

// Next returns the next message, exactly as stored, and how many more
// messages on the filters the server held when it sent it (0: this is the
// last for now). It waits for one as long as ctx lasts; a consumer lost on
// the way (deleted, its server restarted, a message missing between two)
// is made again where the reading is.
func (f *Follower) Next() (*jetstream.RawStreamMsg, uint64, error) {
	for {
		if f.ctx.Err() != nil {
			return nil, 0, f.ctx.Err()
		}
		if f.p == nil {
			if err := f.restart(); err != nil {
				return nil, 0, err
			}
		}
		m, err := f.p.Next()
		if err != nil {
			if f.ctx.Err() != nil {
				return nil, 0, f.ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil, 0, err
			}
			f.drop() // deleted, silent or unanswered: start again
			continue
		}
		d := pulled{m}
		md, err := d.Metadata()
		if err != nil {
			return nil, 0, fmt.Errorf("bus: follow the log: %w", err)
		}
		if md.Sequence.Consumer != f.cseq+1 {
			f.drop() // a message went missing on the way
			continue
		}
		f.cseq, f.next = md.Sequence.Consumer, md.Sequence.Stream+1
		return &jetstream.RawStreamMsg{Subject: d.Subject(), Sequence: md.Sequence.Stream, Header: d.Headers(), Data: d.Data(),
			Time: md.Timestamp}, md.NumPending, nil
	}
}

// Stop ends the reading and gives the consumer up. To end a Next that
// waits, end its ctx: Stop is for the goroutine that calls Next.
func (f *Follower) Stop() { f.drop() }
