package output_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/output"
)

// TestRunTakesOverTheConsumerOfStopsFromBefore: OUTPUT read stops with a
// consumer named after their one subject before stops named their node.
// Started on such a log, it reads on from where that consumer had settled
// (not from the log's first stop, and missing none stored on either
// subject since) and deletes it.
func TestRunTakesOverTheConsumerOfStopsFromBefore(t *testing.T) {
	t.Parallel()
	f := start(t)
	legacy := "e31.job.*.stopped"
	// Stored before: a stop on the subject of then, which the old
	// consumer had settled.
	stopOn := func(job string, before bool) {
		t.Helper()
		h := events.Hold{Attempt: 1, Node: "n1", CPU: 1}
		if _, err := f.pub.Append(f.ctx, job, &events.ComputeHeld{Hold: h, Submitter: "alice"}); err != nil {
			t.Fatal(err)
		}
		m, err := events.New(job, &events.RunStopped{Hold: h, Outcome: events.Failed,
			Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}}}, "e31/run/n1", time.Now()).Msg()
		if err != nil {
			t.Fatal(err)
		}
		if before {
			m.Subject = "e31.job." + job + ".stopped"
		}
		if _, err := f.js.PublishMsg(f.ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	stopOn("settled", true)
	info, err := f.js.Stream(f.ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	next := info.CachedInfo().State.LastSeq + 1
	name := bus.ConsumerName("output", legacy)
	if _, err := f.js.CreateConsumer(f.ctx, events.Stream, jetstream.ConsumerConfig{Durable: name, FilterSubject: legacy,
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next}); err != nil {
		t.Fatal(err)
	}
	stopOn("old-subject", true)
	stopOn("new-subject", false)

	svc, err := output.New(f.js, output.Config{Store: f.store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	w := &world{fixture: f}
	for _, job := range []string{"old-subject", "new-subject"} {
		w.waitEvent(t, job, func(e events.Event) bool { _, ok := e.(*events.OutputReturned); return ok })
	}
	if ret := f.returned(t, "settled"); len(ret) != 0 {
		t.Errorf("the stop the old consumer had settled was returned again: %+v", ret)
	}
	if _, err := f.js.Consumer(f.ctx, events.Stream, name); err == nil {
		t.Errorf("the consumer %s is still there", name)
	}
}
