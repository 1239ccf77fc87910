package stack

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestProvisionMakesEveryStreamOnce: on an empty server Provision makes
// every stream and bucket, again changes nothing, RaiseReplicas finds each
// with its one replica (one server can give no more) and OpenDataBucket
// makes a submitter's bucket.
func TestProvisionMakesEveryStreamOnce(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	for range 2 {
		if err := Provision(ctx, js, events.StreamOptions{Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	found, err := RaiseReplicas(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != len(Streams) {
		t.Fatalf("found %v, want each of %v", found, Streams)
	}
	for i, r := range found {
		if r.Stream != Streams[i] || r.Had != 1 || r.Raised {
			t.Errorf("%+v, want %s with 1 replica, not raised", r, Streams[i])
		}
	}
	if err := OpenDataBucket(ctx, js, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, "OBJ_"+events.DataBucketFor("alice")); err != nil {
		t.Errorf("alice's data bucket: %v", err)
	}
}

// TestSetupOnOneServerAskingForReplicasSaysSoAtOnce: a server that is
// not part of a cluster refuses more than one replica, and always will:
// setup says so at once, where it retried until its timeout.
func TestSetupOnOneServerAskingForReplicasSaysSoAtOnce(t *testing.T) {
	t.Parallel()
	js := natstest.Start(t).JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	err := Provision(ctx, js, events.StreamOptions{Replicas: 3})
	if !errors.Is(err, ErrNotClustered) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("provision with 3 replicas on one server: %v, want %v at once", err, ErrNotClustered)
	}
	if err := Provision(ctx, js, events.StreamOptions{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := RaiseReplicas(ctx, js, 3); !errors.Is(err, ErrNotClustered) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("raise to 3 replicas on one server: %v, want %v at once", err, ErrNotClustered)
	}
}
