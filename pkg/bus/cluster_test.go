package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestRepeatedAppendConflictsInACluster appends an event after the one it
// reacts to, then appends it again with the same expectation, as a step
// does that crashed after its append and handles the trigger again. A
// clustered stream acknowledges the repeat as a duplicate (it looks for
// duplicates before it checks the expectation); Append must report a
// conflict, as a single server does, or RUN would start an attempt twice.
func TestRepeatedAppendConflictsInACluster(t *testing.T) {
	t.Parallel()
	js := natstest.StartCluster(t).JS
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })
	hold := events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 1 << 20}, Submitter: "alice", Spec: submitted().Spec}
	trigger, err := pub.Append(ctx, "job-1", &hold)
	if err != nil {
		t.Fatal(err)
	}
	start := events.RunStarted{Hold: hold.Hold}
	first, err := pub.Append(ctx, "job-1", &start, bus.ExpectLast(trigger.Seq))
	if err != nil {
		t.Fatal(err)
	}
	_, err = pub.Append(ctx, "job-1", &start, bus.ExpectLast(trigger.Seq))
	if !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("repeated RunStarted after #%d (first stored at #%d): err %v, want ErrConflict", trigger.Seq, first.Seq, err)
	}
	// In a batch too (RENT's holds).
	_, errs := pub.AppendBatch(ctx, []bus.Pending{{Subject: "job-1", Event: &start, Expect: trigger.Seq, ExpectSet: true}})
	if !errors.Is(errs[0], bus.ErrConflict) {
		t.Fatalf("repeated RunStarted in a batch: err %v, want ErrConflict", errs[0])
	}
	// Without an expectation a repeat is what it always was: stored once.
	again, err := pub.Append(ctx, "job-1", &start)
	if err != nil || again.Seq != first.Seq {
		t.Fatalf("repeat without expectation: #%d, %v; want #%d, nil", again.Seq, err, first.Seq)
	}
}

// TestLeasesRaisedToThreeReplicasAreWrittenToDisk: on one server the lease
// streams are acknowledged before the disk has them (events.leasePersist),
// but a stream's persist mode is for ever and JetStream writes no
// replicated stream so: on a server of a cluster, where e31 setup may
// raise them to three replicas, they are made as every other stream is,
// and the raise succeeds.
func TestLeasesRaisedToThreeReplicasAreWrittenToDisk(t *testing.T) {
	t.Parallel()
	js := natstest.StartCluster(t).JS
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// StartCluster made every stream with three replicas; made again by a
	// service that starts before e31 setup, they have one.
	leases := []string{events.KVStream(events.LeasesBucket), events.KVStream(events.NodeLeasesBucket)}
	for _, name := range leases {
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range leases {
		if _, raised, err := events.RaiseReplicas(ctx, js, name, 3); err != nil || !raised {
			t.Fatalf("raise %s: %v, %v", name, raised, err)
		}
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := st.CachedInfo().Config; cfg.Replicas != 3 || cfg.PersistMode != jetstream.DefaultPersistMode {
			t.Errorf("%s raised: %d replicas, written %v; want 3, default", name, cfg.Replicas, cfg.PersistMode)
		}
	}
}
