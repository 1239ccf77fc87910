package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/retry"
)

// Tail keeps a projection up to date with the log: it reads the log in
// order (a Follower) from where the projection is, hands the messages to
// the projection's Apply in batches, and tells whoever waits how far the
// projection is: the last sequence applied (Applied, WaitFor, Changed) and
// whether it has caught up with the log as it was when it started
// (CaughtUp). RENT's pool, the LEDGER's records, OUTPUT's retention and
// the metrics are each one Apply over one Tail.
//
// Run is for one goroutine; every other method may be called concurrently
// with it and with each other.
type Tail struct {
	js   jetstream.JetStream
	opts TailOptions

	mu       sync.Mutex
	next     uint64 // the sequence to read from when the reading starts again
	applied  uint64
	pending  uint64 // messages left to read, as of the last one read
	err      error  // why the reading last stopped, while it is stopped
	changed  chan struct{}
	live     bool
	caughtUp chan struct{}
}

// TailOptions says what a Tail reads and what it does when the reading
// fails.
type TailOptions struct {
	// Filters are the subjects read; default: every job and node event.
	Filters []string
	// Name, if set, names the consumer the Tail reads with (see
	// FollowAs), and Service the service it reads for: the Observer in
	// Run's context is told of it (Consuming), so that what it has left
	// to read is watched like a durable consumer's backlog.
	Name, Service string
	// From is the first sequence to read (0 or 1: the first there is),
	// for a projection that starts from a state it kept.
	From uint64
	// Batch bounds the messages handed to Apply at once (default 256). A
	// batch is handed over early when it ends with the last message there
	// was: a live event is applied at once.
	Batch int
	// Again makes Run read again, after a pause (retry.Follow), when the
	// reading fails, rather than end with the error: for a projection that
	// may stand still a while (its readiness says so), not for one that
	// decides from what it read.
	Again bool
	// CaughtUp, if set, is called once, on Run's goroutine, right after
	// the projection caught up with the log as it was when Run started.
	CaughtUp func(ctx context.Context)
	// Logger reports readings started again.
	Logger *slog.Logger
}

// Apply folds msgs into a projection: consecutive messages on the Tail's
// filters, exactly as stored (a message that is not a valid event is the
// projection's to skip), in stream order, never twice in one Run. It is
// called on Run's goroutine; an error ends Run.
type Apply func(ctx context.Context, msgs []*jetstream.RawStreamMsg) error

// NewTail returns a Tail that reads with js; Run reads.
func NewTail(js jetstream.JetStream, opts TailOptions) *Tail {
	if opts.Batch <= 0 {
		opts.Batch = 256
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	from := max(opts.From, 1)
	return &Tail{js: js, opts: opts, next: from, applied: from - 1, changed: make(chan struct{}), caughtUp: make(chan struct{})}
}

// StartAt makes the Tail read from seq on, for a projection that learned
// from a state it kept what comes before, once the Tail was made. It is
// for before Run.
func (t *Tail) StartAt(seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next = max(seq, 1)
	t.applied = t.next - 1
}

// Run reads the log and applies it until ctx ends (then it returns nil),
// apply fails, or the reading fails and Again is not set. A consumer lost
// on the way is made again where the reading is (see Follower).
func (t *Tail) Run(ctx context.Context, apply Apply) error {
	pauses := retry.Follow.BackOff()
	for {
		before := t.Applied()
		err := t.run(ctx, apply)
		if ctx.Err() != nil {
			return nil
		}
		var applyErr applyError
		if !t.opts.Again || errors.As(err, &applyErr) {
			return err
		}
		t.mu.Lock()
		t.err = err
		t.mu.Unlock()
		if t.Applied() != before {
			pauses.Reset() // it read for a while: a new failure
		}
		pause := pauses.NextBackOff()
		t.opts.Logger.Warn("reading the log stopped; reading it again", "in", pause, "err", err)
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}

// applyError is a failure of the projection's Apply: reading again would
// not help.
type applyError struct{ error }

func (e applyError) Unwrap() error { return e.error }

// run reads from t.next until the reading or apply fails.
func (t *Tail) run(ctx context.Context, apply Apply) error {
	t.mu.Lock()
	from := t.next
	t.mu.Unlock()
	f, err := FollowAs(ctx, t.js, t.opts.Name, t.opts.Filters, from)
	if err != nil {
		return err
	}
	f.Retrying(func(err error, in time.Duration) {
		t.opts.Logger.Warn("the log's consumer was lost and could not be made again; trying again",
			"consumer", t.opts.Name, "from", f.next, "in", in, "err", err)
	})
	o := ObserverFrom(ctx)
	name := ""
	// named tells the observer which consumer is read, whenever that
	// changes (Follower.Name).
	named := func() {
		if f.Name() == name || t.opts.Name == "" {
			return
		}
		switch {
		case name == "":
		case f.Name() == t.opts.Name:
			t.opts.Logger.Info("reading the log under the consumer of its own name again", "consumer", f.Name(), "was", name)
		default:
			t.opts.Logger.Warn("reading the log under another consumer: the one of its own name is on a server that is down, and could not be made again",
				"consumer", f.Name(), "own", t.opts.Name, "from", f.next)
		}
		name = f.Name()
		if o != nil {
			o.Consuming(t.opts.Service, "follow", events.Stream, name)
		}
	}
	named()
	defer f.Stop()
	t.mu.Lock()
	t.err, t.pending = nil, f.Pending()
	t.mu.Unlock()
	if f.Pending() == 0 {
		t.caughtUpNow(ctx)
	}
	batch := make([]*jetstream.RawStreamMsg, 0, t.opts.Batch)
	for {
		m, pending, err := f.Next()
		if err != nil {
			return fmt.Errorf("bus: read the log from #%d: %w", from, err)
		}
		named()
		batch = append(batch, m)
		if len(batch) < t.opts.Batch && pending > 0 {
			continue
		}
		if err := apply(ctx, batch); err != nil {
			return applyError{fmt.Errorf("apply #%d to #%d: %w", batch[0].Sequence, m.Sequence, err)}
		}
		t.mu.Lock()
		t.next, t.applied, t.pending = m.Sequence+1, m.Sequence, pending
		close(t.changed)
		t.changed = make(chan struct{})
		t.mu.Unlock()
		if pending == 0 {
			t.caughtUpNow(ctx)
		}
		// A new slice, since Apply may keep the one it was handed; as long
		// as what is left to read, so that a projection following live
		// events, one or a few at a time, does not allocate a whole batch
		// for each.
		batch = make([]*jetstream.RawStreamMsg, 0, min(uint64(t.opts.Batch), pending+1))
	}
}

// caughtUpNow marks the projection caught up, the first time.
func (t *Tail) caughtUpNow(ctx context.Context) {
	t.mu.Lock()
	first := !t.live
	t.live = true
	t.mu.Unlock()
	if !first {
		return
	}
	close(t.caughtUp)
	if t.opts.CaughtUp != nil {
		t.opts.CaughtUp(ctx)
	}
}

// Applied is the last sequence applied (From-1 before any).
func (t *Tail) Applied() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied
}

// Changed is the last sequence applied, and a channel closed once a later
// one is: for a caller that waits with a deadline of its own.
func (t *Tail) Changed() (uint64, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied, t.changed
}

// WaitFor returns once the projection has applied seq, or with ctx's
// error, saying how far it is.
func (t *Tail) WaitFor(ctx context.Context, seq uint64) error {
	for {
		applied, changed := t.Changed()
		if applied >= seq {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("the projection has read the log up to #%d, not yet #%d: %w", applied, seq, ctx.Err())
		}
	}
}

// WaitCurrent returns once the projection has applied everything the log
// held when it was called.
func (t *Tail) WaitCurrent(ctx context.Context) error {
	last, err := LastSeq(ctx, t.js)
	if err != nil {
		return err
	}
	return t.WaitFor(ctx, last)
}

// CaughtUp is closed once the projection has applied the log as it was
// when Run started: the end of its rebuild.
func (t *Tail) CaughtUp() <-chan struct{} { return t.caughtUp }

// Live reports whether the projection has caught up: what it applies now
// is news, not rebuild.
func (t *Tail) Live() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}

// Status is how far the projection is, for a readiness check: the last
// sequence applied, the messages there were left to read as of the last
// one read, and why the reading stopped if it has (nil while it reads).
func (t *Tail) Status() (applied, pending uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied, t.pending, t.err
}

// LastSeq is the log's last sequence now.
func LastSeq(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	st, err := js.Stream(ctx, events.Stream)
	if err != nil {
		return 0, fmt.Errorf("the log's last sequence: %w", err)
	}
	return st.CachedInfo().State.LastSeq, nil
}

// Decoded is an Apply that decodes each message and hands the events to
// fold, with their sequence, one at a time. A message that is not a valid
// event is skipped (logged, unless it is of a type this version does not
// know: a newer writer's event is no fault): a projection must not stop
// at what a newer or hostile writer left in the log.
func Decoded(log *slog.Logger, fold func(ctx context.Context, env events.Envelope) error) Apply {
	return func(ctx context.Context, msgs []*jetstream.RawStreamMsg) error {
		for _, m := range msgs {
			env, err := events.Decode(m.Subject, m.Header, m.Data)
			if err != nil {
				if log != nil && !events.IsUnknownType(err) {
					log.Warn("skipping a message that is not an event", "seq", m.Sequence, "err", err)
				}
				continue
			}
			env.Seq = m.Sequence
			if err := fold(ctx, env); err != nil {
				return err
			}
		}
		return nil
	}
}
