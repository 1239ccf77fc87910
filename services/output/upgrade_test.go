package output_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/output"
)

// TestRunTakesOverTheConsumerOfStopsFromBefore: OUTPUT read stops with a
// consumer named after their one subject before stops named their node,
// then with one of both subjects. Started on a log with either, it reads
// on from where that consumer had settled (not from the log's first stop,
// and missing none stored on either subject since) and deletes it.
func TestRunTakesOverTheConsumerOfStopsFromBefore(t *testing.T) {
	t.Parallel()
	for _, filters := range [][]string{{"e31.job.*.stopped"}, {"e31.job.*.stopped.*", "e31.job.*.stopped"}} {
		t.Run(strings.Join(filters, "+"), func(t *testing.T) {
			t.Parallel()
			takeOver(t, filters)
		})
	}
}

func takeOver(t *testing.T, filters []string) {
	f := start(t)
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
	name := bus.ConsumerName("output", strings.Join(filters, " "))
	if _, err := f.js.CreateConsumer(f.ctx, events.Stream, jetstream.ConsumerConfig{Durable: name, FilterSubjects: filters,
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next}); err != nil {
		t.Fatal(err)
	}
	stopOn("old-subject", true)
	stopOn("new-subject", false)

	runOutput(t, f)
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

// TestRunReturnsStopsFromBeforeOnALogItReadsFirst: OUTPUT started for the
// first time on a log with stops stored on the subject of before, and no
// consumer of them, returns them too, though its consumer reads only the
// subject that names the node.
func TestRunReturnsStopsFromBeforeOnALogItReadsFirst(t *testing.T) {
	t.Parallel()
	f := start(t)
	h := events.Hold{Attempt: 1, Node: "n1", CPU: 1}
	if _, err := f.pub.Append(f.ctx, "old", &events.ComputeHeld{Hold: h, Submitter: "alice"}); err != nil {
		t.Fatal(err)
	}
	m, err := events.New("old", &events.RunStopped{Hold: h, Outcome: events.Failed,
		Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}}}, "e31/run/n1", time.Now()).Msg()
	if err != nil {
		t.Fatal(err)
	}
	m.Subject = "e31.job.old.stopped"
	if _, err := f.js.PublishMsg(f.ctx, m); err != nil {
		t.Fatal(err)
	}
	runOutput(t, f)
	w := &world{fixture: f}
	w.waitEvent(t, "old", func(e events.Event) bool { _, ok := e.(*events.OutputReturned); return ok })
}

// runOutput runs OUTPUT on f until the test ends. Stopped as it may still
// be starting (a stop is handed over before its consumer is made), a
// setup cut short is no fault; any other error is.
func runOutput(t *testing.T, f *fixture) {
	t.Helper()
	svc, err := output.New(f.js, output.Config{Store: f.store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	})
}
