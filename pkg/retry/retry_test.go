package retry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/retry"
)

func apiErr(status, code int, desc string) error {
	return &jetstream.APIError{Code: status, ErrorCode: jetstream.ErrorCode(code), Description: desc}
}

func TestTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"request timeout", nats.ErrTimeout, true},
		{"no ack for an object's chunk", fmt.Errorf("put blob/sha256/dc51: %w", jetstream.ErrAsyncPublishTimeout), true},
		{"no ack for an async publish", nats.ErrAsyncPublishTimeout, true},
		{"request deadline", fmt.Errorf("stream info: %w", context.DeadlineExceeded), true},
		{"no responders", nats.ErrNoResponders, true},
		{"no stream response", jetstream.ErrNoStreamResponse, true},
		{"disconnected", nats.ErrDisconnected, true},
		{"reconnecting", fmt.Errorf("publish: %w", nats.ErrConnectionReconnecting), true},
		{"cluster not available", apiErr(503, 10008, "JetStream system temporarily unavailable"), true},
		{"no cluster leader", apiErr(500, 10009, "JetStream cluster can not handle request"), true},
		{"not assigned yet", apiErr(500, 10007, "JetStream cluster not assigned to this server"), true},
		{"incomplete results", apiErr(503, 10004, "incomplete results"), true},
		{"last sequence per subject not ready", apiErr(503, 10163, "expected last sequence per subject temporarily unavailable"), true},
		{"wrapped cluster not available", fmt.Errorf("create consumer: %w", apiErr(503, 10008, "")), true},
		{"joined with a timeout", errors.Join(errors.New("first try"), nats.ErrTimeout), true},
		// Permanent, whatever the status says.
		{"ack policy can not be updated", apiErr(500, 10012, "consumer create: ack policy can not be updated"), false},
		{"invalid stream config", apiErr(500, 10052, "stream config invalid"), false},
		{"stream offline", apiErr(500, 10118, "stream is offline"), false},
		{"jetstream not enabled", apiErr(503, 10076, "JetStream not enabled"), false},
		{"stream not found", jetstream.ErrStreamNotFound, false},
		{"consumer not found", jetstream.ErrConsumerNotFound, false},
		// A conflict is decided again (bus.React), not sent again.
		{"wrong last sequence", apiErr(400, 10071, "wrong last sequence: 7"), false},
		{"wrong last sequence, clustered", apiErr(400, 10164, "wrong last sequence"), false},
		{"bad request", apiErr(400, 10003, "bad request"), false},
		{"cancelled", context.Canceled, false},
		{"connection closed", nats.ErrConnectionClosed, false},
		{"anything else", errors.New("boom"), false},
	} {
		if got := retry.Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// fast is a policy for tests: short pauses, bounded.
var fast = retry.Policy{First: time.Millisecond, Max: 4 * time.Millisecond}

func TestDoTriesAgainWhileTransient(t *testing.T) {
	t.Parallel()
	calls, notified := 0, 0
	err := retry.Do(context.Background(), fast, func() error {
		calls++
		if calls < 4 {
			return nats.ErrTimeout
		}
		return nil
	}, retry.OnRetry(func(err error, in time.Duration) {
		notified++
		if in <= 0 || in > fast.Max+fast.Max/4 {
			t.Errorf("pause %s outside (0, %s·1.2]", in, fast.Max)
		}
	}))
	if err != nil || calls != 4 || notified != 3 {
		t.Errorf("err %v after %d calls, %d notices; want nil after 4 calls, 3 notices", err, calls, notified)
	}
}

func TestDoStopsAtAPermanentError(t *testing.T) {
	t.Parallel()
	permanent := apiErr(500, 10012, "ack policy can not be updated")
	calls := 0
	err := retry.Do(context.Background(), fast, func() error { calls++; return permanent })
	if calls != 1 || !errors.Is(err, permanent) {
		t.Errorf("err %v after %d calls; want the permanent error after 1 call", err, calls)
	}
	calls = 0
	err = retry.Do(context.Background(), fast, func() error {
		calls++
		if calls < 3 {
			return permanent
		}
		return nil
	}, retry.If(retry.Always))
	if err != nil || calls != 3 {
		t.Errorf("with If(Always): err %v after %d calls; want nil after 3", err, calls)
	}
}

func TestDoGivesUpAfterFor(t *testing.T) {
	t.Parallel()
	p := fast
	p.For = 50 * time.Millisecond
	start := time.Now()
	calls := 0
	err := retry.Do(context.Background(), p, func() error { calls++; return nats.ErrTimeout })
	if !errors.Is(err, nats.ErrTimeout) || calls < 2 {
		t.Errorf("err %v after %d calls; want the last timeout after several", err, calls)
	}
	if took := time.Since(start); took > 10*p.For {
		t.Errorf("gave up after %s, want about %s", took, p.For)
	}
}

func TestDoEndsWithItsContextAndKeepsTheFailure(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := retry.Do(ctx, retry.Policy{First: time.Hour, Max: time.Hour}, func() error {
		calls++
		cancel()
		return nats.ErrNoResponders
	})
	if !errors.Is(err, nats.ErrNoResponders) || !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("err %v after %d calls; want the failure and the cancellation after 1 call", err, calls)
	}
}

func TestBackOffGrowsToItsCap(t *testing.T) {
	t.Parallel()
	p := retry.Policy{First: 100 * time.Millisecond, Max: time.Second}
	b := p.BackOff()
	var last time.Duration
	for range 20 {
		last = b.NextBackOff()
		if last <= 0 || last > p.Max+p.Max/4 {
			t.Fatalf("pause %s outside (0, %s·1.2]", last, p.Max)
		}
	}
	if last < p.Max*3/4 {
		t.Errorf("after 20 pauses: %s, want about the cap %s", last, p.Max)
	}
	b.Reset()
	if first := b.NextBackOff(); first > p.First+p.First/4 {
		t.Errorf("after Reset: %s, want about %s", first, p.First)
	}
}

// passing says of itself that it passes.
type passing struct{}

func (passing) Error() string   { return "not now" }
func (passing) Transient() bool { return true }

// TestAnErrorThatSaysItPassesIsTransient: a service's answer that it could
// not do it now is tried again, wrapped or not.
func TestAnErrorThatSaysItPassesIsTransient(t *testing.T) {
	t.Parallel()
	if !retry.Transient(passing{}) || !retry.Transient(fmt.Errorf("gate: %w", passing{})) {
		t.Error("an error that says it passes is not transient")
	}
}
