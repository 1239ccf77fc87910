package rent_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/lease"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/rent"
)

// TestANodeThatRenewsIsNotCountedLostForALaggingCopy: a node renews its
// lease in its own bucket, and RENT watches the copy in the leases bucket.
// When the copying stalls (here: its source taken away), the copy lapses
// while the node renews on and runs its jobs: RENT must not count it lost
// on the copy alone, or the jobs would run twice at once. Once the node
// stops renewing, its own lease lapses too, and it is counted lost.
func TestANodeThatRenewsIsNotCountedLostForALaggingCopy(t *testing.T) {
	t.Parallel()
	const ttl, margin = 2 * time.Second, 500 * time.Millisecond
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	leases := natstest.LeaseTTL(ctx, t, js, ttl)
	own, err := js.KeyValue(ctx, events.NodeLeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lease.Claim(ctx, own, "node.n1", "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	renewing, stopRenewing := context.WithCancel(ctx)
	kept := make(chan error, 1)
	go func() { kept <- l.Keep(renewing, nil) }()
	defer func() {
		stopRenewing()
		<-kept //nolint:errcheck // the test stops it
	}()
	appendStep := appender(t, ctx, js)
	appendStep(announce("n1", 4))

	logs := &watchedLog{seen: map[string]chan struct{}{}}
	svc, err := rent.New(srv.Conn(t), js, rent.Config{Instance: "a", Logger: slog.New(logs), LapseMargin: margin})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-done //nolint:errcheck // whatever it says: the test checks what RENT recorded
	})
	leaderIs(t, ctx, leases, "a", 10*time.Second)

	// The copying stalls: the leases bucket sources the nodes' no more,
	// and the copy lapses a TTL after the last one came.
	st, err := js.Stream(ctx, events.KVStream(events.LeasesBucket))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Sources = nil
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-logs.wait("the copying lags"):
	case <-ctx.Done():
		t.Fatal("RENT never judged the node's lapsed copy")
	}
	if seq := lastNodeEvent(t, ctx, js, "e31.node.n1.expired"); seq != 0 {
		t.Fatalf("node n1 counted lost (#%d) while it renewed its lease in its own bucket", seq)
	}

	// The node stops renewing: its own lease lapses, and it is lost.
	stopRenewing()
	nextNodeEvent(t, ctx, js, "e31.node.n1.expired")
}

// lastNodeEvent is the sequence of the last event on subject, 0 if none.
func lastNodeEvent(t *testing.T, ctx context.Context, js jetstream.JetStream, subject string) uint64 {
	t.Helper()
	m, err := bus.Last(ctx, js, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0
	case err != nil:
		t.Fatal(err)
	}
	return m.Sequence
}

// watchedLog is a log whose messages a test can wait for.
type watchedLog struct {
	mu   sync.Mutex
	seen map[string]chan struct{} // closed once a message holding the key was logged
	all  []string
}

// wait returns a channel closed once a message holding words is logged.
func (w *watchedLog) wait(words string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.seen[words]
	if c == nil {
		c = make(chan struct{})
		w.seen[words] = c
		for _, m := range w.all {
			if strings.Contains(m, words) {
				close(c)
				break
			}
		}
	}
	return c
}

func (w *watchedLog) Enabled(context.Context, slog.Level) bool { return true }
func (w *watchedLog) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *watchedLog) WithGroup(string) slog.Handler            { return w }
func (w *watchedLog) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all = append(w.all, r.Message)
	for words, c := range w.seen {
		if strings.Contains(r.Message, words) {
			select {
			case <-c:
			default:
				close(c)
			}
		}
	}
	return nil
}
