package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/run/executor"
)

// TestRunAnnouncesItsIsolation: a node that runs jobs as plain processes
// says so when it joins the pool, and says whether its operator allowed it,
// so that RENT can keep jobs off it.
func TestRunAnnouncesItsIsolation(t *testing.T) {
	t.Parallel()
	for _, allow := range []bool{true, false} {
		srv := natstest.Start(t)
		js := srv.JetStream(t)
		nc := srv.Conn(t)
		ctx := natstest.Context(t, 15*time.Second)
		sub, err := nc.SubscribeSync("e31.node.n1.announced")
		if err != nil {
			t.Fatal(err)
		}
		exec, err := executor.NewProcess(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
			t.Fatal(err)
		}
		obs, err := js.ObjectStore(ctx, events.DataBucket)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := run.New(js, run.Config{Node: "n1", CPU: 1, MemoryBytes: 1 << 30, DiskBytes: 1 << 30,
			Executor: exec, Store: stage.NewObjectStore(obs), AllowUnisolated: allow, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- svc.Run(runCtx) }()
		msg, err := sub.NextMsg(10 * time.Second)
		stop()
		// Stopped at once, it may be stopped while it waits for the
		// announcement's acknowledgement.
		if rerr := <-done; rerr != nil && !errors.Is(rerr, context.Canceled) {
			t.Errorf("Run: %v", rerr)
		}
		if err != nil {
			t.Fatalf("no announcement: %v", err)
		}
		var ann events.NodeAnnounced
		if err := json.Unmarshal(msg.Data, &ann); err != nil {
			t.Fatal(err)
		}
		if ann.Isolation != events.IsolationNone || ann.AllowUnisolated != allow {
			t.Errorf("announced isolation %q, allow_unisolated %v; want none, %v", ann.Isolation, ann.AllowUnisolated, allow)
		}
	}
}

// TestRunStartedSaysHowTheAttemptIsIsolated: the start of an attempt
// records the isolation it runs under, which the hold record reports.
func TestRunStartedSaysHowTheAttemptIsIsolated(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	n.handleHeld(t, n.hold(t, "job-1", job(`true`, nil)))
	evs, err := bus.ReadJob(n.ctx, n.js, "job-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if s, ok := e.Event.(*events.RunStarted); ok {
			if s.Isolation != events.IsolationNone {
				t.Errorf("RunStarted isolation %q under the process executor, want none", s.Isolation)
			}
			return
		}
	}
	t.Fatalf("no RunStarted in %v", evs)
}
