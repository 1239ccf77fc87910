package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestANodesLeaseReachesTheLeasesAndCannotRollThemUp: a node writes its
// lease in the nodes' bucket; the leases bucket, which RENT watches, has
// it, renewed, and sees it lapse. A write there with "Nats-Rollup: all"
// (which, in the leases bucket, would purge every lease) is refused, and
// the nodes' bucket cannot be purged. A deployment made before the nodes'
// bucket is linked by LinkNodeLeases, once.
func TestANodesLeaseReachesTheLeasesAndCannotRollThemUp(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	check := func(t *testing.T, ctx context.Context, js jetstream.JetStream) {
		t.Helper()
		leases, err := js.KeyValue(ctx, events.LeasesBucket)
		if err != nil {
			t.Fatal(err)
		}
		mine, err := js.KeyValue(ctx, events.NodeLeasesBucket)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := mine.Status(ctx); err != nil || st.TTL() != events.NodeLeaseTTL(ttl) {
			t.Errorf("the nodes' lease time: %v, %v; want %v", st.TTL(), err, events.NodeLeaseTTL(ttl))
		}
		w, err := leases.Watch(ctx, "node.*")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = w.Stop() }()
		next := func(what string) jetstream.KeyValueEntry {
			t.Helper()
			for {
				select {
				case e := <-w.Updates():
					if e != nil {
						return e
					}
				case <-ctx.Done():
					t.Fatalf("the leases bucket never saw %s", what)
				}
			}
		}
		if _, err := leases.Create(ctx, "leader.rent", []byte("r1")); err != nil {
			t.Fatal(err)
		}
		rev, err := mine.Put(ctx, "node.n1", []byte("b1"))
		if err != nil {
			t.Fatal(err)
		}
		if e := next("the lease"); e.Key() != "node.n1" || string(e.Value()) != "b1" || e.Operation() != jetstream.KeyValuePut {
			t.Fatalf("the leases bucket saw %s %q %v", e.Key(), e.Value(), e.Operation())
		}
		if _, err := mine.Update(ctx, "node.n1", []byte("b1"), rev); err != nil {
			t.Fatalf("a renewal: %v", err)
		}
		if e := next("the renewal"); e.Operation() != jetstream.KeyValuePut {
			t.Fatalf("the renewal reads as %v", e.Operation())
		}
		m := nats.NewMsg("$KV." + events.NodeLeasesBucket + ".node.n1")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
		m.Data = []byte("b1")
		if _, err := js.PublishMsg(ctx, m); err == nil {
			t.Error("a write with Nats-Rollup: all was stored")
		}
		st, err := js.Stream(ctx, events.KVStream(events.NodeLeasesBucket))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Purge(ctx); err == nil {
			t.Error("the nodes' leases were purged")
		}
		if e, err := leases.Get(ctx, "leader.rent"); err != nil || string(e.Value()) != "r1" {
			t.Errorf("the leader's lease: %v, %v", e, err)
		}
		// Not renewed: it lapses where RENT watches.
		if e := next("the lapse"); e.Key() != "node.n1" || e.Operation() == jetstream.KeyValuePut {
			t.Errorf("after the lease time the leases bucket saw %s %v", e.Key(), e.Operation())
		}
		if _, err := mine.Update(ctx, "node.n1", []byte("b1"), rev+1); err == nil {
			t.Error("a renewal after the lapse was taken")
		}
	}
	t.Run("made now", func(t *testing.T) {
		t.Parallel()
		ctx := natstest.Context(t, 20*time.Second)
		js, err := jetstream.New(natstest.Start(t).Conn(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := events.Setup(ctx, js, events.StreamOptions{LeaseTTL: ttl}); err != nil {
			t.Fatal(err)
		}
		// On one server the leases are acknowledged before the disk has
		// them (events.leasePersist); the log and the ledger are not.
		persisted(t, ctx, js, map[string]jetstream.PersistModeType{
			events.KVStream(events.LeasesBucket): jetstream.AsyncPersistMode, events.KVStream(events.NodeLeasesBucket): jetstream.AsyncPersistMode,
			events.Stream: jetstream.DefaultPersistMode, events.KVStream(events.LedgerBucket): jetstream.DefaultPersistMode,
		})
		check(t, ctx, js)
	})
	t.Run("made before, linked", func(t *testing.T) {
		t.Parallel()
		ctx := natstest.Context(t, 20*time.Second)
		js, err := jetstream.New(natstest.Start(t).Conn(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateKeyValue(ctx, events.LeasesBucketConfig(events.StreamOptions{LeaseTTL: ttl})); err != nil {
			t.Fatal(err)
		}
		if changed, err := events.LinkNodeLeases(ctx, js); err != nil || !changed {
			t.Fatalf("LinkNodeLeases: %v, %v", changed, err)
		}
		if again, err := events.LinkNodeLeases(ctx, js); err != nil || again {
			t.Errorf("LinkNodeLeases again: %v, %v; want nothing to do", again, err)
		}
		// A stream's persist mode is for ever: the old bucket stays as it
		// was made.
		persisted(t, ctx, js, map[string]jetstream.PersistModeType{
			events.KVStream(events.LeasesBucket): jetstream.DefaultPersistMode, events.KVStream(events.NodeLeasesBucket): jetstream.AsyncPersistMode,
		})
		check(t, ctx, js)
	})
}

// persisted checks how each stream is written.
func persisted(t *testing.T, ctx context.Context, js jetstream.JetStream, want map[string]jetstream.PersistModeType) {
	t.Helper()
	for name, mode := range want {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.PersistMode; got != mode {
			t.Errorf("stream %s is written %v, want %v", name, got, mode)
		}
	}
}
