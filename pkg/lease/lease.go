// Package lease keeps short-lived claims in a JetStream KV bucket: a run
// node's "I am alive" and a scheduler's "I am the one deciding". A lease is
// a key whose value names its owner; the bucket's TTL removes it unless the
// owner renews it, and a watcher sees the removal. Renewal is
// compare-and-set on the key's revision, so an owner that was presumed dead
// finds out at its next renewal and can stop acting (fence itself).
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

// Lease is one held key. Its methods may be called concurrently.
type Lease struct {
	kv    jetstream.KeyValue
	key   string
	owner string
	ttl   time.Duration

	// mu guards what a renewal changes: Keep renews on one goroutine while
	// others ask Valid before they act.
	mu  sync.Mutex
	rev uint64
	// renewed is when the last renewal was stored: an owner must not act
	// on the lease once ttl/2 has passed without one.
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

// Acquire takes key for owner if nobody holds it.
func Acquire(ctx context.Context, kv jetstream.KeyValue, key, owner string) (*Lease, error) {
	ttl, err := TTL(ctx, kv)
	if err != nil {
		return nil, err
	}
	rev, err := kv.Create(ctx, key, []byte(owner))
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
		return nil, fmt.Errorf("%w: %s", ErrHeld, key)
	}
	if err != nil {
		return nil, fmt.Errorf("lease: acquire %s: %w", key, err)
	}
	return &Lease{kv: kv, key: key, owner: owner, ttl: ttl, rev: rev, renewed: time.Now()}, nil
}

// Claim takes key for owner whoever held it: a node restarting under its
// own name takes over its old lease.
func Claim(ctx context.Context, kv jetstream.KeyValue, key, owner string) (*Lease, error) {
	ttl, err := TTL(ctx, kv)
	if err != nil {
		return nil, err
	}
	rev, err := kv.Put(ctx, key, []byte(owner))
	if err != nil {
		return nil, fmt.Errorf("lease: claim %s: %w", key, err)
	}
	return &Lease{kv: kv, key: key, owner: owner, ttl: ttl, rev: rev, renewed: time.Now()}, nil
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Valid reports whether the owner may still act on the lease: it was renewed
// within the last half of its TTL, so it cannot have expired yet.
// It is safe to call concurrently with Renew and Keep.
func (l *Lease) Valid() bool {
	return time.Since(l.renewedAt()) < l.ttl/2
}

// revision is the key's revision as of the last renewal.
func (l *Lease) revision() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rev
}

// Renew extends the lease, or reports ErrLost if it expired or changed hands.
func (l *Lease) Renew(ctx context.Context) error {
	rev, err := l.kv.Update(ctx, l.key, []byte(l.owner), l.revision())
	if err != nil {
		if isWrongSequence(err) || errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return fmt.Errorf("%w: %s", ErrLost, l.key)
		}
		return fmt.Errorf("lease: renew %s: %w", l.key, err)
	}
	l.mu.Lock()
	l.rev, l.renewed = rev, time.Now()
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
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			before := l.renewedAt()
			err := l.Renew(ctx)
			if errors.Is(err, ErrLost) {
				return err
			}
			if err == nil && l.lapsedSince(before) && regained != nil {
				regained()
			}
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
