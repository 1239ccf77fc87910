package run_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestRunRecordsItsJobsThenGivesUpTheNodesLease: on the way out, RUN
// stops the jobs it runs and records them while it still holds the node's
// lease, then gives the lease up, so that RENT counts the node gone at once
// and the jobs' attempts are not given up as lost behind RUN's back.
// Nothing Run started outlives it.
func TestRunRecordsItsJobsThenGivesUpTheNodesLease(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction(natstest.LeftBySourcing)) })
	n := startNode(t, nil)
	nc := n.js.Conn()
	seen := make(chan *nats.Msg, 16)
	// The node writes its lease in the nodes' bucket; its start and stop
	// end with its name.
	for _, subject := range []string{"$KV." + events.NodeLeasesBucket + ".node.n1", "e31.job.long.started.n1", "e31.job.long.stopped.n1"} {
		sub, err := nc.ChanSubscribe(subject, seen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	next := func(what string) *nats.Msg {
		t.Helper()
		select {
		case m := <-seen:
			return m
		case <-n.ctx.Done():
			t.Fatalf("waiting for %s: %v", what, n.ctx.Err())
			return nil
		}
	}

	ctx, stop := context.WithCancel(n.ctx)
	done := make(chan error, 1)
	go func() { done <- n.run.Run(ctx) }()
	if m := next("the node's lease"); m.Subject != "$KV."+events.NodeLeasesBucket+".node.n1" {
		t.Fatalf("first came %s, want the node's lease", m.Subject)
	}
	n.hold(t, "long", job("sleep 60", nil))
	for m := next("the start"); m.Subject != "e31.job.long.started.n1"; m = next("the start") {
	}
	stop()
	var order []string
	for len(order) < 2 {
		m := next("the stop and the lease given up")
		switch {
		case m.Subject == "e31.job.long.stopped.n1":
			order = append(order, "stopped")
		case m.Header.Get("KV-Operation") == "DEL":
			order = append(order, "lease given up")
		}
	}
	if order[0] != "stopped" {
		t.Errorf("order on the way out: %v; want the job recorded first, then the lease given up", order)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	_, stopped := n.log(t, "long")
	if stopped == nil || stopped.Outcome != events.NodeLost {
		t.Errorf("the job stopped by the shutdown: %+v, want node_lost", stopped)
	}
}
