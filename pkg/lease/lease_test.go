package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/lease"
	"github.com/e31net/e31/pkg/natstest"
)

func bucket(t *testing.T, ttl time.Duration) (context.Context, jetstream.KeyValue) {
	t.Helper()
	ctx, _, kv := bucketOn(t, ttl)
	return ctx, kv
}

func bucketOn(t *testing.T, ttl time.Duration) (context.Context, jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	kv := natstest.LeaseTTL(ctx, t, js, ttl)
	return ctx, js, kv
}

// TestValidWhileKeepRenews: the scheduler asks Valid before every decision
// while Keep renews on another goroutine; run with -race.
func TestValidWhileKeepRenews(t *testing.T) {
	t.Parallel()
	// Renewed every second, valid for a second and a half after each: a
	// margin a loaded machine's renewal keeps within.
	const ttl = 3 * time.Second
	ctx, kv := bucket(t, ttl)
	l, err := lease.Acquire(ctx, kv, "leader.test", "a")
	if err != nil {
		t.Fatal(err)
	}
	keepCtx, stop := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- l.Keep(keepCtx, nil) }()

	// Two lease times of asking, from several goroutines at once: the
	// lease is renewed every third of one, so it is valid throughout. They
	// ask every millisecond, not in a busy loop, which would take the
	// cores (and the lease's lock) from the renewal it checks.
	until := time.Now().Add(2 * ttl)
	var wg sync.WaitGroup
	invalid := make(chan time.Time, 1)
	for range 4 {
		wg.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for range tick.C {
				if !time.Now().Before(until) {
					return
				}
				if !l.Valid() {
					select {
					case invalid <- time.Now():
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	stop()
	if err := <-kept; err != nil {
		t.Errorf("Keep: %v", err)
	}
	select {
	case at := <-invalid:
		t.Errorf("the lease was not valid at %s while it was kept", at.Format(time.RFC3339Nano))
	default:
	}
}

// TestReleaseLetsAStandbyTakeOverAtOnce: a released lease is free without
// waiting for it to lapse.
func TestReleaseLetsAStandbyTakeOverAtOnce(t *testing.T) {
	t.Parallel()
	ctx, kv := bucket(t, time.Minute)
	l, err := lease.Acquire(ctx, kv, "leader.test", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Acquire(ctx, kv, "leader.test", "b"); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("a held lease taken again: err = %v, want ErrHeld", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Acquire(ctx, kv, "leader.test", "b"); err != nil {
		t.Fatalf("after the release: %v", err)
	}
	// The old owner finds out at its next renewal.
	if err := l.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Errorf("renewing a lease taken over: err = %v, want ErrLost", err)
	}
}

// TestKeepSaysWhenTheLeaseIsValidAgain: renewals that fail for a while
// (the bucket refuses every write, as a cluster does while it elects a
// leader) leave the lease held but not valid, so its owner stops acting;
// the first renewal that succeeds before it expired makes it valid again
// and says so: RENT's scheduler is woken by it, and without it
// waited for an event that only RENT would have appended.
func TestKeepSaysWhenTheLeaseIsValidAgain(t *testing.T) {
	t.Parallel()
	// Renewed every 2 s, valid for 3 s after each, expired after 6 s: the
	// gap below lasts from the lease's taking to a renewal 4 s after it.
	const ttl = 6 * time.Second
	ctx, js, kv := bucketOn(t, ttl)
	l, err := lease.Acquire(ctx, kv, "leader.test", "a")
	if err != nil {
		t.Fatal(err)
	}
	// Every renewal fails now, and not as a lost lease.
	allowWrites := natstest.RefuseWrites(ctx, t, js, events.KVStream(events.LeasesBucket))

	regained := make(chan time.Time, 4)
	keepCtx, stop := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- l.Keep(keepCtx, func() { regained <- time.Now() }) }()
	defer func() {
		stop()
		if err := <-kept; err != nil {
			t.Errorf("Keep: %v", err)
		}
	}()

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for l.Valid() {
		select {
		case <-regained:
			t.Fatal("regained called while the lease was still valid")
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("the lease stayed valid with every renewal failing")
		}
	}
	lapsedAt := time.Now()
	allowWrites()
	select {
	case at := <-regained:
		if !l.Valid() {
			t.Errorf("regained called at %s (%s after the lease lapsed) with the lease not valid",
				at.Format(time.RFC3339Nano), at.Sub(lapsedAt))
		}
	case err := <-kept:
		t.Fatalf("Keep ended instead of renewing: %v", err)
	case <-ctx.Done():
		t.Fatal("the lease was renewed again, but regained was never called")
	}
}
