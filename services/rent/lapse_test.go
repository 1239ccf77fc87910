package rent_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/rent"
)

// TestANodeIsCountedLostALapseMarginAfterItsLeaseIsGone: RENT sees a
// node's lease gone and waits the lapse margin more before it records the
// node lost (and so before it holds the node's jobs again elsewhere): room
// for the node's clock to run slower than the servers', since the node
// stops its own jobs by its clock. The attempt held there is given up only
// then.
func TestANodeIsCountedLostALapseMarginAfterItsLeaseIsGone(t *testing.T) {
	t.Parallel()
	const ttl, margin = 2 * time.Second, 1500 * time.Millisecond
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	kv := natstest.LeaseTTL(ctx, t, js, ttl)
	if _, err := kv.Put(ctx, "node.n1", []byte("boot-1")); err != nil {
		t.Fatal(err)
	}
	appendStep := appender(t, ctx, js)
	appendStep(announce("n1", 4))
	svc, err := rent.New(srv.Conn(t), js, rent.Config{Instance: "a", Logger: quiet, LapseMargin: margin})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-done //nolint:errcheck // whatever it says: the test checks what RENT recorded
	})
	leaderIs(t, ctx, kv, "a", 10*time.Second)
	appendStep(submit("job", 1))
	waitFor(t, ctx, js, "job", events.TypeComputeHeld)

	// The lease is gone now, and RENT's watcher sees it at once: what it
	// would see when the key expired.
	gone := time.Now()
	if err := kv.Delete(ctx, "node.n1"); err != nil {
		t.Fatal(err)
	}
	nextNodeEvent(t, ctx, js, "e31.node.n1.expired")
	after := time.Since(gone)
	waitFor(t, ctx, js, "job", events.TypeHoldLost)
	if after < margin {
		t.Errorf("the node was counted lost %s after its lease was gone, before the lapse margin of %s", after, margin)
	}
	if after > margin+5*time.Second {
		t.Errorf("the node was counted lost %s after its lease was gone; the margin is %s", after, margin)
	}
	t.Logf("lease gone; node counted lost %s later (lapse margin %s)", after.Round(time.Millisecond), margin)
}

// nextNodeEvent waits for the first event on a node's subject.
func nextNodeEvent(t *testing.T, ctx context.Context, js jetstream.JetStream, subject string) {
	t.Helper()
	waitForNodeEvent(t, ctx, js, subject)
}

// waitForNodeEvent waits for the first event on a node's subject and
// returns its sequence.
func waitForNodeEvent(t *testing.T, ctx context.Context, js jetstream.JetStream, subject string) uint64 {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatalf("waiting for %s: %v", subject, err)
	}
	if _, err := events.Decode(m.Subject(), m.Headers(), m.Data()); err != nil {
		t.Fatal(err)
	}
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return md.Sequence.Stream
}

// TestAStandbyForgetsALapseTheLeaderRecorded: both instances see a node's
// lease gone; once the standby reads the leader's NodeExpired, it has
// nothing left to record, and would record nothing again if it led.
func TestAStandbyForgetsALapseTheLeaderRecorded(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	kv := natstest.LeaseTTL(ctx, t, js, ttl)
	if _, err := kv.Put(ctx, "node.n1", []byte("boot-1")); err != nil {
		t.Fatal(err)
	}
	appender(t, ctx, js)(announce("n1", 4))
	runRent(t, srv, js, "a")
	leaderIs(t, ctx, kv, "a", 10*time.Second)
	b := runRent(t, srv, js, "b")
	for b.svc.Ready(ctx) != nil { // its pool rebuilt, so that it counts the node live
		select {
		case <-ctx.Done():
			t.Fatal("the standby never rebuilt its pool")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := kv.Delete(ctx, "node.n1"); err != nil {
		t.Fatal(err)
	}
	expired := waitForNodeEvent(t, ctx, js, "e31.node.n1.expired")
	if err := b.svc.WaitApplied(ctx, expired); err != nil {
		t.Fatal(err)
	}
	if n := b.svc.Expiring(); n != 0 {
		t.Errorf("the standby still has %d lapsed nodes to record after the leader recorded the lapse", n)
	}
}
