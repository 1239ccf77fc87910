package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// testCheckpoint is a service's checkpoint: a Mark, and what it adds.
type testCheckpoint struct {
	bus.Mark
	Kept []string `json:"kept,omitempty"`
}

// TestACheckpointIsStartedFromOnlyIfItIsOfThisLog: a checkpoint says where
// a projection may start reading the log. One that is missing, does not
// read, is of another log (one made anew since, at another time), or whose
// From is not within the log past its first message is not started from:
// the projection reads the whole log, which is slow but never wrong. Any
// other is, and reads into the service's own type.
func TestACheckpointIsStartedFromOnlyIfItIsOfThisLog(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 10*time.Second)
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })
	for _, job := range []string{"job-1", "job-2", "job-3"} {
		if _, err := pub.Append(ctx, job, submitted()); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	made, last := st.CachedInfo().Created, st.CachedInfo().State.LastSeq
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "CHECKPOINT_TEST"})
	if err != nil {
		t.Fatal(err)
	}
	load := func(t *testing.T) (bool, testCheckpoint) {
		t.Helper()
		var c testCheckpoint
		ok, gotMade, err := bus.LoadCheckpoint(ctx, js, kv, "checkpoint", &c, slog.New(slog.DiscardHandler), "the test's projection")
		if err != nil {
			t.Fatal(err)
		}
		if !gotMade.Equal(made) {
			t.Errorf("the log was made at %v, want %v", gotMade, made)
		}
		return ok, c
	}
	if ok, _ := load(t); ok {
		t.Errorf("no checkpoint is started from")
	}
	for name, body := range map[string]string{
		"unreadable":      `{"log":`,
		"another log":     mustJSON(t, testCheckpoint{Mark: bus.Mark{Log: made.Add(-time.Hour), From: 2}}),
		"past the log":    mustJSON(t, testCheckpoint{Mark: bus.Mark{Log: made, From: last + 2}}),
		"the first event": mustJSON(t, testCheckpoint{Mark: bus.Mark{Log: made, From: 1}}),
		"no From":         mustJSON(t, testCheckpoint{Mark: bus.Mark{Log: made}}),
	} {
		if _, err := kv.Put(ctx, "checkpoint", []byte(body)); err != nil {
			t.Fatal(err)
		}
		if ok, _ := load(t); ok {
			t.Errorf("%s: %s is started from", name, body)
		}
	}
	want := testCheckpoint{Mark: bus.Mark{Log: made, From: last + 1, Applied: last}, Kept: []string{"job-3"}}
	if _, err := kv.Put(ctx, "checkpoint", []byte(mustJSON(t, want))); err != nil {
		t.Fatal(err)
	}
	if ok, got := load(t); !ok || got.From != want.From || got.Applied != want.Applied || !slices.Equal(got.Kept, want.Kept) || !got.Log.Equal(made) {
		t.Errorf("a checkpoint of this log: started from %v, read %+v, want %+v", ok, got, want)
	}
}

// TestKeepCheckpointWritesAsItGoesAndOnTheWayOut: a leader's checkpoint
// is written at once, and every instance's once more when it stops (any
// instance's is true), with what the projection says then.
func TestKeepCheckpointWritesAsItGoesAndOnTheWayOut(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 10*time.Second)
	for _, leads := range []bool{true, false} {
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: fmt.Sprintf("CHECKPOINT_TEST_%v", leads)})
		if err != nil {
			t.Fatal(err)
		}
		w, err := kv.Watch(ctx, "checkpoint", jetstream.UpdatesOnly())
		if err != nil {
			t.Fatal(err)
		}
		written := func() uint64 {
			t.Helper()
			select {
			case e := <-w.Updates():
				var c testCheckpoint
				if err := json.Unmarshal(e.Value(), &c); err != nil {
					t.Fatal(err)
				}
				return c.From
			case <-ctx.Done():
				t.Fatalf("leads %v: no checkpoint written", leads)
				return 0
			}
		}
		var from atomic.Uint64
		from.Store(7)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			bus.KeepCheckpoint(runCtx, kv, "checkpoint", time.Hour, func() bool { return leads }, func() any {
				return testCheckpoint{Mark: bus.Mark{From: from.Load()}}
			}, slog.New(slog.DiscardHandler))
		}()
		if leads {
			if got := written(); got != 7 {
				t.Errorf("a leader wrote a checkpoint from #%d at once, want #7", got)
			}
		}
		from.Store(9)
		stop()
		<-done
		if got := written(); got != 9 {
			t.Errorf("leads %v: on the way out the checkpoint says #%d, want #9", leads, got)
		}
		_ = w.Stop()
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
