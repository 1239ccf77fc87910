package bus_test

import (
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestTheLeadersHistoryIsTheReplicas: asked of the leader a message at a
// time, a job's log reads as the batched direct gets read it (the same
// events, the same last message, the same junk set aside), from the start
// and from the middle; a job another's subjects name only by prefix is
// not read with it. (That a lagging replica's answer is made whole by it
// is the cluster test's: e2e, a NATS server killed and one cut off.)
func TestTheLeadersHistoryIsTheReplicas(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })
	first, err := pub.Append(ctx, "job-1", submitted())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Append(ctx, "job-10", submitted()); err != nil {
		t.Fatal(err)
	}
	junk(t, ctx, js, "job-1", "mallory", true)
	if _, err := pub.Append(ctx, "job-1", &events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 1 << 20}, Submitter: "alice"}); err != nil {
		t.Fatal(err)
	}
	for _, from := range []uint64{1, first.Seq + 1} {
		want, err := bus.ReadHistory(ctx, js, "job-1", from)
		if err != nil {
			t.Fatal(err)
		}
		got, err := bus.LeaderHistory(ctx, js, "job-1", from)
		if err != nil {
			t.Fatalf("leader history from #%d: %v", from, err)
		}
		if got.Last != want.Last || got.SetAside != want.SetAside || len(got.Events) != len(want.Events) {
			t.Fatalf("from #%d: the leader's history ends at #%d with %d events, %d set aside; the replicas' at #%d with %d, %d",
				from, got.Last, len(got.Events), got.SetAside, want.Last, len(want.Events), want.SetAside)
		}
		for i := range got.Events {
			if got.Events[i].Seq != want.Events[i].Seq || got.Events[i].ID != want.Events[i].ID {
				t.Errorf("from #%d, event %d: #%d %s, want #%d %s", from, i, got.Events[i].Seq, got.Events[i].ID, want.Events[i].Seq, want.Events[i].ID)
			}
		}
	}
}
