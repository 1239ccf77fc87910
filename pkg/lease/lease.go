package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrHeld means someone else holds the lease.
var ErrHeld = errors.New("lease: held by another owner")

// ErrLost means the lease expired or was taken while we thought we held it.
var ErrLost = errors.New("lease: lost")

// ErrFenced means no renewal could be shown for the lease's TTL less the
// fence margin, on the owner's own clock: the lease may lapse before the
// owner hears of it again, so it must stop acting now (see the package doc).
var ErrFenced = errors.New("lease: no renewal shown in time; fenced")

// Lease is one held key. Its methods may be called concurrently.
type Lease struct {
	kv    jetstream.KeyValue
	key   string
	owner string
	ttl   time.Duration
	clock Clock
	// unanswered is called when a renewal runs out its deadline.
	unanswered func()

	// mu guards what a renewal changes: Keep renews on one goroutine while
	// others ask Valid before they act.
	mu  sync.Mutex
	rev uint64
	// renewed is when the last renewal that was stored had been sent, on
	// the owner's clock: the key cannot expire before renewed+ttl. An owner
	// must not act on the lease once ttl/2 has passed without one.
	renewed time.Time
}

// TTL is the bucket's lease time.
func TTL(ctx context.Context, kv jetstream.KeyValue) (time.Duration, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("lease: bucket status: %w", err)
	}
	if st.TTL() <= 0 {
		return 0, errors.New("lease: bucket has no TTL")
	}
	return st.TTL(), nil
}

// newLease is a lease of key for owner, not yet taken.
func newLease(ctx context.Context, kv jetstream.KeyValue, key, owner string, opts []Option) (*Lease, error) {
	ttl, err := TTL(ctx, kv)
	if err != nil {
		return nil, err
	}
	l := &Lease{kv: kv, key: key, owner: owner, ttl: ttl, clock: systemClock{}}
	for _, o := range opts {
		o(l)
	}
	return l, nil
}

// Acquire takes key for owner if nobody holds it.
func Acquire(ctx context.Context, kv jetstream.KeyValue, key, owner string, opts ...Option) (*Lease, error) {
	l, err := newLease(ctx, kv, key, owner, opts)
	if err != nil {
		return nil, err
	}
	sent := l.clock.Now()
	rev, err := kv.Create(ctx, key, []byte(owner))
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
		return nil, fmt.Errorf("%w: %s", ErrHeld, key)
	}
	if err != nil {
		return nil, fmt.Errorf("lease: acquire %s: %w", key, err)
	}
	l.rev, l.renewed = rev, sent
	return l, nil
}

// Claim takes key for owner whoever held it: a node restarting under its
// own name takes over its old lease.
func Claim(ctx context.Context, kv jetstream.KeyValue, key, owner string, opts ...Option) (*Lease, error) {
	l, err := newLease(ctx, kv, key, owner, opts)
	if err != nil {
		return nil, err
	}
	sent := l.clock.Now()
	rev, err := kv.Put(ctx, key, []byte(owner))
	if err != nil {
		return nil, fmt.Errorf("lease: claim %s: %w", key, err)
	}
	l.rev, l.renewed = rev, sent
	return l, nil
}

// TTL is the lease's time: how long after a renewal the key may expire.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Expiry is the earliest moment the key can expire, on the owner's clock:
// the TTL after the last renewal that was stored was sent.
func (l *Lease) Expiry() time.Time { return l.renewedAt().Add(l.ttl) }

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Valid reports whether the owner may still act on the lease: it was renewed
// within the last half of its TTL, so it cannot have expired yet.
// It is safe to call concurrently with Renew and Keep.
func (l *Lease) Valid() bool {
	return l.clock.Now().Sub(l.renewedAt()) < l.ttl/2
}

// revision is the key's revision as of the last renewal.
func (l *Lease) revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// Renew extends the lease, or reports ErrLost if it expired or changed
// hands. The renewal counts from the moment it is sent.
func (l *Lease) Renew(ctx context.Context) error {
	sent := l.clock.Now()
	rev, err := l.kv.Update(ctx, l.key, []byte(l.owner), l.revision())
	if isWrongSequence(err) {
		// A renewal whose answer was lost (its request's deadline passed
		// after the server stored it) moved the revision on: the key
		// still names this owner. Its revision is taken, its time not
		// (when it was sent is not known), and the next renewal counts.
		if e, gerr := l.kv.Get(ctx, l.key); gerr == nil && string(e.Value()) == l.owner && e.Revision() > l.revision() {
			l.mu.Lock()
			l.rev = e.Revision()
			l.mu.Unlock()
			return fmt.Errorf("lease: renew %s: a renewal whose answer was lost was stored; taking its revision", l.key)
		}
	}
	if err != nil {
		if isWrongSequence(err) || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return fmt.Errorf("%w: %s", ErrLost, l.key)
		}
		return fmt.Errorf("lease: renew %s: %w", l.key, err)
	}
	l.mu.Lock()
	l.rev, l.renewed = rev, sent
	l.mu.Unlock()
	return nil
}

// Keep renews the lease every TTL/3 until ctx ends (nil) or the lease is
// lost (ErrLost). A renewal that fails for another reason (the server is
// briefly away) is retried at the next tick; once the lease has expired
// meanwhile, the next renewal reports it lost.
//
// A renewal that succeeds half a TTL or more after the last one ends a gap
// in which the lease was held but not Valid and its owner did not act:
// the renewals failed meanwhile, or this one waited seconds on a NATS
// server just lost. Keep then calls regained (if not nil): an owner that
// acts only when something wakes it (RENT's scheduler, woken by the log)
// must be woken then, or it waits for an event that only it would append.
// The cluster test stood still so when a NATS server was killed.
func (l *Lease) Keep(ctx context.Context, regained func()) error {
	return l.keep(ctx, regained, 0)
}

// KeepFenced renews the lease as Keep does, and fences on the owner's
// clock: once no renewal can be shown for the TTL less margin (0 < margin
// < TTL), whatever the connection to NATS believes, it calls fenced (if
// not nil) at once, stops renewing and returns ErrFenced. The owner must
// then stop whatever the lease allowed it before the key can expire
// ([Margins.StopTimes] says by when), and take a new lease (see the
// package doc); fenced is where it starts to, since the renewals may take
// a while to stop.
//
// The fence is watched apart from the renewals: a renewal may be held up
// past its own deadline (nats.go holds its connection's lock while it
// dials a server that does not answer, and a request waits for the lock
// before its context is looked at), and a fence that waited for it came
// seconds late, after the lease had expired.
func (l *Lease) KeepFenced(ctx context.Context, margin time.Duration, fenced func()) error {
	if margin <= 0 || margin >= l.ttl {
		return fmt.Errorf("lease: fence margin %s outside (0, %s)", margin, l.ttl)
	}
	renewing, stop := context.WithCancel(ctx)
	defer stop()
	kept := make(chan error, 1)
	go func() { kept <- l.keep(renewing, nil, margin) }()
	for {
		now, fenceAt := l.clock.Now(), l.renewedAt().Add(l.ttl-margin)
		if !now.Before(fenceAt) {
			if fenced != nil {
				fenced()
			}
			stop()
			// The renewals stop with the fence: what they last said is
			// the fence's to say.
			<-kept //nolint:errcheck // the fence is the answer
			return fmt.Errorf("%w: %s: no renewal shown for %s, at a TTL of %s", ErrFenced, l.key, l.ttl-margin, l.ttl)
		}
		select {
		case err := <-kept:
			return err
		case <-l.clock.After(fenceAt.Sub(now)):
		}
	}
}

// keep is Keep. With margin > 0 (KeepFenced), each renewal's request ends
// by the fence, TTL less margin after the last renewal; every request ends
// by the next tick: a request sent on a connection that went silent is
// never answered, and nats.go waits for its answer until its context ends.
func (l *Lease) keep(ctx context.Context, regained func(), margin time.Duration) error {
	period := l.ttl / 3
	// The first renewal is due a third of the TTL after the last one, not
	// after the loop began: an owner that held its lease a while before
	// keeping it (a node waiting to be seen where RENT watches) renews at
	// once, rather than let its fence come first. Each one after is due a
	// period after the one before was tried, answered or not.
	due := l.renewedAt().Add(period)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.clock.After(max(due.Sub(l.clock.Now()), 0)):
		}
		now, wait := l.clock.Now(), period
		due = now.Add(period)
		if margin > 0 {
			wait = min(wait, l.renewedAt().Add(l.ttl-margin).Sub(now))
		}
		before := l.renewedAt()
		try, cancel := context.WithTimeout(ctx, wait)
		err := l.Renew(try)
		cancel()
		if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && l.unanswered != nil {
			l.unanswered()
		}
		if errors.Is(err, ErrLost) {
			return err
		}
		if err == nil && l.lapsedSince(before) && regained != nil {
			regained()
		}
	}
}

// renewedAt is when the lease was last renewed (or taken).
func (l *Lease) renewedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed
}

// lapsedSince reports whether the lease was not Valid at some moment
// between a renewal at before and its last renewal: whether they are half
// a TTL apart or more.
func (l *Lease) lapsedSince(before time.Time) bool {
	return l.renewedAt().Sub(before) >= l.ttl/2
}

// Release gives the lease up at once, so that a successor need not wait for
// it to expire.
func (l *Lease) Release(ctx context.Context) error {
	if err := l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.revision())); err != nil && !isWrongSequence(err) {
		return fmt.Errorf("lease: release %s: %w", l.key, err)
	}
	return nil
}
