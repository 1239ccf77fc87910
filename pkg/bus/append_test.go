package bus_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

var at = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func submitted() *events.JobSubmitted {
	return &events.JobSubmitted{Submitter: "alice", Spec: events.JobSpec{
		Work:    events.Work{Command: []string{"/bin/true"}},
		Request: events.Request{CPU: 1, MemoryBytes: 1 << 20, LimitSeconds: 60},
	}}
}

func TestAppendTwiceStoresOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 10*time.Second)
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })

	first, err := pub.Append(ctx, "job-1", submitted())
	if err != nil {
		t.Fatal(err)
	}
	again, err := pub.Append(ctx, "job-1", submitted())
	if err != nil {
		t.Fatal(err)
	}
	if again.Seq != first.Seq {
		t.Errorf("second append stored at #%d, want the first one's #%d", again.Seq, first.Seq)
	}
	got, err := bus.ReadJob(ctx, js, "job-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("job has %d events, want 1", len(got))
	}
	if got[0].ID != "job-1/submitted" || got[0].Source != "e31/test" || !got[0].Time.Equal(at) {
		t.Errorf("stored envelope = %+v", got[0])
	}
}

func TestExpectLastRefusesAStaleAppend(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 10*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)

	sub, err := pub.Append(ctx, "job-2", submitted(), bus.ExpectLast(0))
	if err != nil {
		t.Fatal(err)
	}
	// Another job's events do not count against job-2's expectation.
	if _, err := pub.Append(ctx, "other", submitted()); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Append(ctx, "job-2", &events.CancelRequested{By: "alice"}, bus.ExpectLast(sub.Seq)); err != nil {
		t.Fatalf("append after the job's last event: %v", err)
	}
	held := events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1}}
	_, err = pub.Append(ctx, "job-2", &held, bus.ExpectLast(sub.Seq))
	if !errors.Is(err, bus.ErrConflict) {
		t.Fatalf("append expecting a stale sequence: err = %v, want ErrConflict", err)
	}
	evs, _ := bus.ReadJob(ctx, js, "job-2", 1)
	if len(evs) != 2 {
		t.Errorf("job has %d events, want 2 (the refused hold must not be stored)", len(evs))
	}
}

// TestReactDecidesAgainAfterAConflict is the rule that makes handlers
// idempotent: a step reacting to an old trigger sees what happened since.
func TestReactDecidesAgainAfterAConflict(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 10*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)

	trigger, err := pub.Append(ctx, "job-3", submitted())
	if err != nil {
		t.Fatal(err)
	}
	hold := events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1}}
	decide := func(after []events.Envelope) ([]events.Event, error) {
		for _, e := range after {
			if _, ok := e.Event.(*events.ComputeHeld); ok {
				return nil, nil // already held: nothing to do
			}
			if _, ok := e.Event.(*events.CancelRequested); ok {
				return []events.Event{&events.JobCancelled{Reason: "cancelled while waiting"}}, nil
			}
		}
		return []events.Event{&hold}, nil
	}

	// First delivery: the fast path holds.
	stored, err := pub.React(ctx, trigger, decide)
	if err != nil || len(stored) != 1 {
		t.Fatalf("first reaction: %v, %v", stored, err)
	}
	// The same trigger delivered again, after the job moved on: nothing new.
	stored, err = pub.React(ctx, trigger, decide)
	if err != nil || len(stored) != 0 {
		t.Fatalf("redelivered trigger stored %v, %v; want nothing", stored, err)
	}
	evs, _ := bus.ReadJob(ctx, js, "job-3", 1)
	if len(evs) != 2 {
		t.Fatalf("job has %d events, want 2", len(evs))
	}

	// A different outcome when something else happened in between.
	trigger4, _ := pub.Append(ctx, "job-4", submitted())
	if _, err := pub.Append(ctx, "job-4", &events.CancelRequested{By: "bob"}); err != nil {
		t.Fatal(err)
	}
	stored, err = pub.React(ctx, trigger4, decide)
	if err != nil || len(stored) != 1 || stored[0].Type != events.TypeJobCancelled {
		t.Fatalf("reaction after a cancel = %v, %v; want JobCancelled", stored, err)
	}
}

func TestReplayReadsToTheEndAndSkipsWhatItCannotDecode(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 10*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := pub.Append(ctx, id, submitted()); err != nil {
			t.Fatal(err)
		}
	}
	// A malformed event from a hostile publisher, and one of a newer type.
	if _, err := js.Publish(ctx, "e31.job.d.submitted", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Append(ctx, "e", submitted()); err != nil {
		t.Fatal(err)
	}
	var ids []string
	last, err := bus.Replay(ctx, js, bus.ReplayOptions{}, func(env events.Envelope) error {
		ids = append(ids, env.Subject)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if last != 5 {
		t.Errorf("last sequence = %d, want 5", last)
	}
	if len(ids) != 4 || ids[3] != "e" {
		t.Errorf("replayed %v, want a b c e", ids)
	}
	// From the middle.
	ids = nil
	if _, err := bus.Replay(ctx, js, bus.ReplayOptions{From: 3}, func(env events.Envelope) error {
		ids = append(ids, env.Subject)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 {
		t.Errorf("replay from #3 gave %v, want c e", ids)
	}
}

func TestAppendBatchReportsEachResult(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 10*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	first, _ := pub.Append(ctx, "x", submitted())
	if _, err := pub.Append(ctx, "x", &events.CancelRequested{By: "alice"}); err != nil {
		t.Fatal(err)
	}
	hold := events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1}}
	envs, errs := pub.AppendBatch(ctx, []bus.Pending{
		{Subject: "x", Event: &hold, Expect: first.Seq, ExpectSet: true},
		{Subject: "y", Event: submitted(), ExpectSet: true},
	})
	if !errors.Is(errs[0], bus.ErrConflict) {
		t.Errorf("stale hold: err = %v, want ErrConflict", errs[0])
	}
	if errs[1] != nil || envs[1].Seq == 0 {
		t.Errorf("new job: %v, seq %d", errs[1], envs[1].Seq)
	}
}

// TestALostAckFailsTheAppend: a publish whose ack never comes (here a
// subscriber that is no stream takes it and answers nothing, as a stream
// leader lost with the publish in flight leaves it) fails the append once
// the handle's async publish timeout has passed, which connect.Ready sets
// for every service (connect.PublishWait). Without one, nats.go waits for
// the ack for ever, and the append for its context: for RENT's scheduler,
// its whole life, silent.
func TestALostAckFailsTheAppend(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := srv.Conn(t)
	if _, err := nc.Subscribe("e31.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	pub := bus.NewPublisher(js, "e31/test", nil)
	// The context outlives the test's patience: only the timeout ends the
	// wait in time.
	ctx := natstest.Context(t, 10*time.Minute)
	_, errs := pub.AppendBatch(ctx, []bus.Pending{{Subject: "job-1", Event: submitted()}})
	if !errors.Is(errs[0], jetstream.ErrAsyncPublishTimeout) {
		t.Fatalf("append with its ack lost: %v; want %v", errs[0], jetstream.ErrAsyncPublishTimeout)
	}
}
