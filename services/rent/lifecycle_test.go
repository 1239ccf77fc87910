package rent_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/rent"
)

// noLeaks checks, once the test's server and connections are gone, that
// nothing the test started is still running. Register it first.
func noLeaks(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction(natstest.LeftBySourcing)) })
}

// instance is one RENT running in the background.
type instance struct {
	svc  *rent.Service
	stop func()
	done chan error
}

// runRent runs one RENT as it is deployed, its consumer and scheduler
// included, until the test ends.
func runRent(t *testing.T, srv *natstest.Server, js jetstream.JetStream, name string) *instance {
	t.Helper()
	svc, err := rent.New(srv.Conn(t), js, rent.Config{Instance: name, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	in := &instance{svc: svc, stop: stop, done: make(chan error, 1)}
	go func() { in.done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		// Whatever it says: a test may take the log away from under it
		// (a deleted stream) to see what it does.
		<-in.done //nolint:errcheck // the answer is the test's own to check
	})
	return in
}

// leaderIs waits until the leader lease names want ("" for none).
func leaderIs(t *testing.T, ctx context.Context, kv jetstream.KeyValue, want string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	w, err := kv.Watch(ctx, "leader.rent")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			if got := string(e.Value()); e.Operation() == jetstream.KeyValuePut && got == want || e.Operation() != jetstream.KeyValuePut && want == "" {
				return
			}
		case <-ctx.Done():
			t.Fatalf("the leader lease did not name %q within %s", want, within)
		}
	}
}

// TestAStandbyLeadsAtOnceWhenTheLeaderStops: the leader gives its lease up
// on the way out, so the standby decides at once, not a lease time later.
func TestAStandbyLeadsAtOnceWhenTheLeaderStops(t *testing.T) {
	noLeaks(t)
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	kv, err := js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	a := runRent(t, srv, js, "a")
	leaderIs(t, ctx, kv, "a", 10*time.Second)
	runRent(t, srv, js, "b")
	a.stop()
	if err := <-a.done; err != nil {
		t.Errorf("Run of a after its context ended: %v", err)
	}
	a.done <- nil
	leaderIs(t, ctx, kv, "b", events.DefaultLeaseTTL/2)
}

// TestRunEndsAndGivesUpLeadershipWhenItCannotFollowTheLog: once its
// consumer is gone for good, RENT would lead while deciding from a pool
// that no longer follows the log. Run ends with the error instead, and the
// lease goes with it.
func TestRunEndsAndGivesUpLeadershipWhenItCannotFollowTheLog(t *testing.T) {
	noLeaks(t)
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	kv, err := js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	a := runRent(t, srv, js, "a")
	leaderIs(t, ctx, kv, "a", 10*time.Second)
	if err := js.DeleteStream(ctx, events.Stream); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.done:
		a.done <- err
		if err == nil {
			t.Fatal("Run returned nil without the log it follows")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on for 30s without the log it follows")
	}
	if _, err := kv.Get(ctx, "leader.rent"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the leader lease after Run ended: err = %v, want it given up", err)
	}
}

// TestRunMakesItsDeletedConsumerAgain: an operator deletes RENT's consumer;
// RENT makes it again and goes on holding jobs.
func TestRunMakesItsDeletedConsumerAgain(t *testing.T) {
	noLeaks(t)
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	pub := bus.NewPublisher(js, "e31/test", nil)
	kv, err := js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	runRent(t, srv, js, "a")
	leaderIs(t, ctx, kv, "a", 10*time.Second)
	for _, s := range []step{announce("n1", 4), submit("job-1", 1)} {
		if _, err := pub.Append(ctx, s.subject, s.ev); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, js, "job-1", events.TypeComputeHeld)
	// RENT's consumer is the only one on the log here; its name is the
	// server's choice.
	stream, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for name := range stream.ConsumerNames(ctx).Name() {
		if err := js.DeleteConsumer(ctx, events.Stream, name); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted == 0 {
		t.Fatal("no consumer to delete: RENT does not follow the log")
	}
	if _, err := pub.Append(ctx, "job-2", submit("job-2", 1).ev); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, js, "job-2", events.TypeComputeHeld)
}

// TestALeaderWhoseLeaseLapsedDecidesWhenItIsRenewed: renewals of the
// leader's lease fail for a while (the leases bucket refuses every write,
// as a cluster does while it elects the bucket's leader), long enough that
// the lease is no longer valid and the leader stops deciding. A job
// submitted then waits. The next renewal, before the lease expired, makes
// the leader valid again, and it must decide then: nothing else would
// wake it, since the next event of the log is the one it appends. The
// cluster test stood still for minutes so after a NATS server was killed.
func TestALeaderWhoseLeaseLapsedDecidesWhenItIsRenewed(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	// Renewed every 3 s, valid for 4.5 s after each, expired after 9 s.
	const ttl = 9 * time.Second
	kv := natstest.LeaseTTL(ctx, t, js, ttl)
	nodeLease := func() {
		t.Helper()
		if _, err := kv.Put(ctx, "node.n1", []byte("boot-1")); err != nil {
			t.Fatal(err)
		}
	}
	nodeLease()
	appendStep := appender(t, ctx, js)
	appendStep(announce("n1", 4))
	runRent(t, srv, js, "a")
	leaderIs(t, ctx, kv, "a", 10*time.Second)
	appendStep(submit("first", 1))
	waitFor(t, ctx, js, "first", events.TypeComputeHeld)

	// From the leader's last renewal on, every renewal fails; the node's
	// lease is fresh, and lasts past the gap.
	nodeLease()
	allowWrites := natstest.RefuseWrites(ctx, t, js, events.KVStream(events.LeasesBucket))
	for {
		last, err := kv.Get(ctx, "leader.rent")
		if err != nil {
			t.Fatal(err)
		}
		// Valid for half a lease time after the renewal was stored, by the
		// leader's clock, which read it a little later: a margin.
		select {
		case <-time.After(time.Until(last.Created().Add(ttl/2 + 300*time.Millisecond))):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		now, err := kv.Get(ctx, "leader.rent")
		if err != nil {
			t.Fatal(err)
		}
		if now.Revision() == last.Revision() {
			break // no renewal since: the lease is held and not valid
		}
	}

	// The job comes while the leader may not decide; it has read it
	// before the lease is renewed.
	second := appendStep(submit("second", 1))
	for {
		c, err := js.Consumer(ctx, events.Stream, "rent-a")
		if err != nil {
			t.Fatal(err)
		}
		if c.CachedInfo().Delivered.Stream >= second.Seq {
			break
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("RENT did not read the second job: %v", ctx.Err())
		}
	}
	if got := (&fixture{ctx: ctx, js: js}).holds(t, "second"); len(got) != 0 {
		t.Fatalf("second held while the leader's lease was not valid: %v", got)
	}
	allowWrites()
	waitFor(t, ctx, js, "second", events.TypeComputeHeld)
}
