package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/lease"
	"github.com/e31net/e31/pkg/natstest"
)

// fakeClock is a Clock the test moves by hand.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	// changed is closed, and replaced, whenever a timer is set.
	changed chan struct{}
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

// Advance moves the clock on by d and fires the timers due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	left := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			left = append(left, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = left
}

// waitTimers waits until n timers are set and not yet fired: an owner
// that sets one timer at a time has done what the last Advance woke it
// for and waits again.
func (c *fakeClock) waitTimers(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		got, changed := len(c.waiters), c.changed
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d timers set, want %d", got, n)
		}
	}
}

// slowKV stores on the real bucket, but the clock moves on by delay while
// each update is on its way: the server stores it after it was sent.
type slowKV struct {
	jetstream.KeyValue
	clock *fakeClock
	delay time.Duration
}

func (s slowKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	s.clock.Advance(s.delay)
	return s.KeyValue.Update(ctx, key, value, rev)
}

// TestAFencedOwnerStopsOnItsOwnClock: with every renewal failing (the
// bucket refuses writes; a silent partition fails them by their
// deadlines instead), KeepFenced returns ErrFenced exactly at the TTL less
// the margin after the last renewal sent, as the owner's clock counts,
// and not a moment before. The bucket's TTL is an hour: the server never
// expires the key during the test, so only the owner's clock can fence.
func TestAFencedOwnerStopsOnItsOwnClock(t *testing.T) {
	t.Parallel()
	const ttl, margin = time.Hour, 10 * time.Minute // renewals every 20 min, fence at 50
	ctx, js, kv := bucketOn(t, ttl)
	clock := newFakeClock()
	l, err := lease.Acquire(ctx, kv, "node.test", "boot-1", lease.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	taken := clock.Now()
	allow := natstest.RefuseWrites(ctx, t, js, events.KVStream(events.LeasesBucket))
	defer allow()
	kept := make(chan error, 1)
	fenced := make(chan time.Time, 1)
	go func() { kept <- l.KeepFenced(ctx, margin, func() { fenced <- clock.Now() }) }()

	clock.waitTimers(t, 2) // the renewal's tick and the fence
	for _, step := range []time.Duration{20 * time.Minute, 20 * time.Minute, 10*time.Minute - time.Millisecond} {
		clock.Advance(step)
		clock.waitTimers(t, 2)
		select {
		case err := <-kept:
			t.Fatalf("KeepFenced returned %v at %s after the lease was taken, before its fence at %s", err, clock.Now().Sub(taken), ttl-margin)
		default:
		}
	}
	clock.Advance(time.Millisecond)
	select {
	case err := <-kept:
		if !errors.Is(err, lease.ErrFenced) {
			t.Fatalf("KeepFenced at the fence: %v, want ErrFenced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("KeepFenced did not return at the fence, %s after the lease was taken", clock.Now().Sub(taken))
	}
	if at := <-fenced; at.Sub(taken) != ttl-margin {
		t.Errorf("fenced was called %s after the lease was taken, want %s", at.Sub(taken), ttl-margin)
	}
	if term, kill := (lease.Margins{Fence: margin}).StopTimes(l.Expiry()); !term.Equal(taken.Add(ttl-margin)) || !kill.Equal(taken.Add(ttl-margin/2)) {
		t.Errorf("stop times %s and %s after the lease was taken, want %s and %s", term.Sub(taken), kill.Sub(taken), ttl-margin, ttl-margin/2)
	}
}

// TestAFencedOwnerIsNotFencedWhileItRenews: renewals that succeed move
// the fence on, however long the owner keeps the lease.
func TestAFencedOwnerIsNotFencedWhileItRenews(t *testing.T) {
	t.Parallel()
	const ttl, margin = time.Hour, 10 * time.Minute
	ctx, kv := bucket(t, ttl)
	clock := newFakeClock()
	l, err := lease.Acquire(ctx, kv, "node.test", "boot-1", lease.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	keepCtx, stop := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- l.KeepFenced(keepCtx, margin, nil) }()
	clock.waitTimers(t, 2)
	for range 10 { // over three TTLs
		clock.Advance(ttl / 3)
		clock.waitTimers(t, 2)
		// The renewal this step woke is stored before the next step.
		renewedBy(t, l, clock.Now().Add(ttl))
	}
	select {
	case err := <-kept:
		t.Fatalf("KeepFenced returned %v while every renewal succeeded", err)
	default:
	}
	stop()
	if err := <-kept; err != nil {
		t.Errorf("KeepFenced after its context ended: %v", err)
	}
}

// TestAnOwnerThatWaitedRenewsAtOnce: an owner that held its lease for a
// while before keeping it (a node waits to be seen where RENT watches
// before it announces itself) renews as soon as it keeps it, a third of
// the TTL after it took it, not a third of the TTL later: its fence would
// come first, and a node then fenced itself the moment it joined.
func TestAnOwnerThatWaitedRenewsAtOnce(t *testing.T) {
	t.Parallel()
	const ttl, margin = time.Hour, 10 * time.Minute
	ctx, kv := bucket(t, ttl)
	clock := newFakeClock()
	l, err := lease.Acquire(ctx, kv, "node.test", "boot-1", lease.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(ttl / 3)
	fenced := make(chan struct{})
	keepCtx, stop := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- l.KeepFenced(keepCtx, margin, func() { close(fenced) }) }()
	// The clock does not move: only a renewal made at once moves the expiry.
	renewedBy(t, l, clock.Now().Add(ttl))
	stop()
	if err := <-kept; err != nil {
		t.Errorf("KeepFenced after its context ended: %v", err)
	}
	select {
	case <-fenced:
		t.Error("the owner fenced itself though it renewed")
	default:
	}
}

// TestARenewalCountsFromWhenItWasSent: the server stores a renewal after
// it was sent, and the key expires a TTL after it was stored; the owner
// counts from the send, the earlier moment, never from the answer.
func TestARenewalCountsFromWhenItWasSent(t *testing.T) {
	t.Parallel()
	const ttl = time.Hour
	ctx, kv := bucket(t, ttl)
	clock := newFakeClock()
	slow, err := lease.Acquire(ctx, slowKV{KeyValue: kv, clock: clock, delay: 5 * time.Minute}, "node.slow", "boot-1", lease.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	sent := clock.Now()
	if err := slow.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if got := slow.Expiry().Sub(sent); got != ttl {
		t.Errorf("a renewal sent at 0 and stored at 5m expires at %s as its owner counts, want %s", got, ttl)
	}
}

// TestMarginsAreChecked: the margins must leave a node time to renew, and
// the pool must never count a node lost before its lease could lapse.
func TestMarginsAreChecked(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	if err := lease.DefaultMargins(ttl).Check(ttl); err != nil {
		t.Errorf("the default margins: %v", err)
	}
	if got := (lease.Margins{Lapse: time.Second}).Or(ttl); got.Fence != ttl/4 || got.Lapse != time.Second {
		t.Errorf("Or filled in %+v, want the default fence and the lapse given", got)
	}
	for _, c := range []struct {
		m    lease.Margins
		ttl  time.Duration
		want string // in the error; "" for none
	}{
		{lease.Margins{Fence: ttl / 2, Lapse: 0}, ttl, ""},
		{lease.Margins{Fence: 0, Lapse: time.Second}, ttl, "must be positive"},
		{lease.Margins{Fence: ttl/2 + time.Millisecond, Lapse: time.Second}, ttl, "over half the lease TTL"},
		{lease.Margins{Fence: time.Second, Lapse: -time.Second}, ttl, "before its lease expired"},
		{lease.Margins{Fence: time.Second, Lapse: time.Second}, 0, "TTL"},
	} {
		err := c.m.Check(c.ttl)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v with TTL %s: %v, want an error saying %q", c.m, c.ttl, err, c.want)
		}
	}
}

// TestARenewalWhoseAnswerWasLostIsNoLoss: a renewal the server stored but
// whose answer never came (its deadline passed) moved the key's revision
// on; the next renewal must not take that for a lease lost (which would
// stop every job on the node), since the key still names its owner.
func TestARenewalWhoseAnswerWasLostIsNoLoss(t *testing.T) {
	t.Parallel()
	ctx, kv := bucket(t, time.Minute)
	l, err := lease.Acquire(ctx, kv, "node.test", "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	// Stored as a renewal of this owner's would be, unbeknown to it.
	e, err := kv.Get(ctx, "node.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "node.test", []byte("boot-1"), e.Revision()); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); errors.Is(err, lease.ErrLost) {
		t.Fatalf("renewing after a renewal whose answer was lost: %v, want no loss", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("the renewal after: %v", err)
	}
	// Taken by another owner: lost.
	e, err = kv.Get(ctx, "node.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "node.test", []byte("boot-2"), e.Revision()); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("renewing a lease another owner took: %v, want ErrLost", err)
	}
}

// silentKV is the real bucket behind a connection gone silent: an update
// is never answered, and waits until its request's deadline.
type silentKV struct{ jetstream.KeyValue }

func (silentKV) Update(ctx context.Context, _ string, _ []byte, _ uint64) (uint64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// TestAnUnansweredRenewalIsTold: a renewal that runs out its deadline
// unanswered is told (a node makes its client reconnect at once, rather
// than wait for its pings to time out), and the owner still fences on
// time.
func TestAnUnansweredRenewalIsTold(t *testing.T) {
	t.Parallel()
	// Renewed at 1 s, unanswered by 2 s, fenced at 2.25 s.
	const ttl, margin = 3 * time.Second, 750 * time.Millisecond
	ctx, kv := bucket(t, ttl)
	unanswered := make(chan struct{}, 8)
	l, err := lease.Acquire(ctx, silentKV{kv}, "node.test", "boot-1",
		lease.OnUnanswered(func() { unanswered <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = l.KeepFenced(ctx, margin, nil)
	if !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("KeepFenced: %v, want ErrFenced", err)
	}
	// The lease counts from before it was taken: a little earlier.
	if took := time.Since(start); took < ttl-margin-100*time.Millisecond || took > ttl {
		t.Errorf("fenced %s after the lease was taken, want at %s", took, ttl-margin)
	}
	if len(unanswered) == 0 {
		t.Error("no unanswered renewal was told")
	}
}

// renewedBy waits until the lease expires at want: a renewal the fake
// clock woke has been stored.
func renewedBy(t *testing.T, l *lease.Lease, want time.Time) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !l.Expiry().Equal(want) {
		if time.Now().After(deadline) {
			t.Fatalf("expiry %s, want %s: the renewal was not stored", l.Expiry(), want)
		}
		time.Sleep(time.Millisecond) // polling a value no event announces, with a deadline
	}
}

// stuckKV is the real bucket behind a client whose every update waits
// for the test, whatever its deadline: nats.go holds its connection's
// lock while it dials a server that does not answer, and a request waits
// for the lock before it looks at its context.
type stuckKV struct {
	jetstream.KeyValue
	release chan struct{}
}

func (s stuckKV) Update(ctx context.Context, _ string, _ []byte, _ uint64) (uint64, error) {
	<-s.release
	return 0, ctx.Err()
}

// TestAStuckRenewalDoesNotHoldTheFenceUp: the fence comes on time while a
// renewal is stuck past its own deadline; KeepFenced returns once the
// renewal is given up.
func TestAStuckRenewalDoesNotHoldTheFenceUp(t *testing.T) {
	t.Parallel()
	const ttl, margin = 3 * time.Second, time.Second
	ctx, kv := bucket(t, ttl)
	stuck := stuckKV{KeyValue: kv, release: make(chan struct{})}
	l, err := lease.Acquire(ctx, stuck, "node.test", "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	fenced := make(chan time.Time, 1)
	kept := make(chan error, 1)
	go func() { kept <- l.KeepFenced(ctx, margin, func() { fenced <- time.Now() }) }()
	select {
	case at := <-fenced:
		if late := at.Sub(taken) - (ttl - margin); late > 200*time.Millisecond {
			t.Errorf("fenced %s late, with a renewal stuck", late)
		}
	case <-time.After(ttl):
		t.Fatal("no fence within the TTL while a renewal was stuck")
	}
	select {
	case err := <-kept:
		t.Fatalf("KeepFenced returned (%v) with its renewal still stuck", err)
	default:
	}
	close(stuck.release)
	if err := <-kept; !errors.Is(err, lease.ErrFenced) {
		t.Errorf("KeepFenced: %v, want ErrFenced", err)
	}
}
