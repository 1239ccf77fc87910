package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/natstest"
)

// instance is one LEDGER of several over one bucket, run on a connection
// of its own so that closing it kills the instance as SIGKILL would: no
// last flush reaches the bucket.
type instance struct {
	name string
	svc  *Service
	kill func()
	done chan error
}

func startInstance(t *testing.T, srv *natstest.Server, name string) *instance {
	t.Helper()
	nc, err := srv.Connect(name)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(nc, js, Config{Logger: slog.New(slog.DiscardHandler), Source: "e31/ledger/" + name, FlushEvery: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{name: name, svc: svc, done: make(chan error, 1)}
	go func() { in.done <- svc.Run(ctx) }()
	in.kill = func() {
		nc.Close()
		cancel()
		<-in.done //nolint:errcheck // whatever it says: its connection is gone
	}
	return in
}

// TestTwoInstancesKeepTheBucketTrue runs two ledgers over one bucket while
// the log grows, kills one or the other (its connection closed: nothing
// more of it reaches the bucket) and starts it again, over and over. Each
// restart starts from whichever checkpoint was last written, usually the
// other's, while the other goes on writing. At the end every record in the
// bucket, and the checkpoint's counts, totals and chain head, must be what
// folding the log up to the checkpoint's sequence makes, and a ledger
// started from the bucket must answer as one that folds the whole log.
func TestTwoInstancesKeepTheBucketTrue(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 180*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	last := appendJobs(t, ctx, pub, 0, 100)

	ins := []*instance{startInstance(t, srv, "a"), startInstance(t, srv, "b")}
	defer func() {
		for _, in := range ins {
			in.kill()
		}
	}()
	const rounds = 24
	for round := range rounds {
		last = appendJobs(t, ctx, pub, 100+round*30, 30)
		in := ins[round%2]
		in.kill()
		ins[round%2] = startInstance(t, srv, fmt.Sprintf("%s%d", in.name[:1], round))
	}
	last = appendJobs(t, ctx, pub, 100+rounds*30, 30)
	// Both catch up and stop as a shutdown does, each writing its last
	// flush if the other wrote none since its base.
	var wg sync.WaitGroup
	for _, in := range ins {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for {
				applied, ch := in.svc.changedSince()
				if applied >= last {
					return
				}
				select {
				case <-ch:
				case <-ctx.Done():
					t.Errorf("%s has applied #%d after 60 s, not #%d", in.name, applied, last)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, in := range ins {
		in.kill()
	}
	ins = nil

	checkBucket(t, ctx, js)
	svc, stop := run(t, nc, js)
	from, _ := svc.Started()
	got := answers(t, nc, last)
	stop()
	if whole := fromScratch(t, nc, js, last); got != whole {
		t.Errorf("a ledger started from the bucket at #%d answers\n%s\nwhere one that folded the whole log answers\n%s", from, got, whole)
	}
}

// checkBucket compares every entry of the ledger's bucket, and its
// checkpoint, with a projection that folds the log up to the checkpoint's
// sequence in memory.
func checkBucket(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	kv, err := js.KeyValue(ctx, events.LedgerBucket)
	if err != nil {
		t.Fatal(err)
	}
	kve, err := kv.Get(ctx, keyCheckpoint)
	if err != nil {
		t.Fatalf("the checkpoint: %v", err)
	}
	var c checkpoint
	if err := json.Unmarshal(kve.Value(), &c); err != nil {
		t.Fatal(err)
	}
	// What an auditor reads of it (e31 audit compares the records there).
	var public hold.Checkpoint
	if err := json.Unmarshal(kve.Value(), &public); err != nil || public.Applied != c.Applied {
		t.Errorf("an auditor reads the checkpoint as of #%d (%v); it is as of #%d", public.Applied, err, c.Applied)
	}
	want := NewProjection()
	foldUpTo(t, ctx, js, want, c.Applied)
	if got, w := c, want.checkpointOf(); !reflect.DeepEqual(got, w) {
		t.Errorf("the checkpoint is\n%+v\nwant (the log folded up to #%d)\n%+v", got, c.Applied, w)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	var bad []string
	for key := range keys.Keys() {
		job, ok := strings.CutPrefix(key, keyRecord)
		if !ok {
			continue
		}
		stored++
		kve, err := kv.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		e, err := decodeEntry(job, kve.Value())
		if err != nil {
			t.Fatal(err)
		}
		w := want.jobs[job]
		if w == nil {
			bad = append(bad, job+": in the bucket, not in the log up to the checkpoint")
			continue
		}
		g, _ := json.Marshal(e.Record)
		x, _ := json.Marshal(w.Record)
		var public hold.Stored
		if err := json.Unmarshal(kve.Value(), &public); err != nil {
			t.Fatal(err)
		}
		if p, _ := json.Marshal(public.Record); string(p) != string(g) {
			bad = append(bad, fmt.Sprintf("%s: an auditor reads the record\n%s\nwhere the ledger's is\n%s", job, p, g))
		}
		if string(g) != string(x) || !reflect.DeepEqual(e.IDs, w.IDs) {
			bad = append(bad, fmt.Sprintf("%s:\n got %s\nwant %s", job, g, x))
		}
	}
	if stored != len(want.jobs) {
		t.Errorf("the bucket holds %d entries; the log up to #%d has %d jobs", stored, c.Applied, len(want.jobs))
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d entries disagree with the log up to the checkpoint (#%d), e.g.\n%s", len(bad), stored, c.Applied, strings.Join(bad[:min(len(bad), 3)], "\n"))
	}
}
