package ledger

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/natstest"
)

// syncBuffer is a log the test reads while the ledger writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestALogThatEndsBeforeTheCheckpointIsAskedAgain: told that the log ends
// before its checkpoint (a server behind answered, during a partition or a
// change of leader), the ledger warns and asks again, and carries on once
// the log is seen to reach it, rather than stop for good as though the
// log had been made again: both instances stopped so in the cluster test.
func TestALogThatEndsBeforeTheCheckpointIsAskedAgain(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	pub := bus.NewPublisher(js, "e31/test", nil)
	last := appendJobs(t, ctx, pub, 0, 3)
	logs := &syncBuffer{}
	s := &Service{js: js, log: slog.New(slog.NewTextHandler(logs, nil))}

	reached := make(chan error, 1)
	go func() { reached <- s.logReaches(ctx, last+5) }()
	for !strings.Contains(logs.String(), "the log ends before the ledger's checkpoint") {
		select {
		case err := <-reached:
			t.Fatalf("logReaches returned %v with the log at #%d, before #%d", err, last, last+5)
		case <-ctx.Done():
			t.Fatal("no warning that the log ends before the checkpoint")
		case <-time.After(10 * time.Millisecond):
		}
	}
	appendJobs(t, ctx, pub, 3, 3)
	select {
	case err := <-reached:
		if err != nil {
			t.Fatalf("the log reached the checkpoint, and the ledger stopped: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the log reached the checkpoint, and the ledger did not see it")
	}
}
