package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// RaiseReplicas gives stream name at least want replicas, never fewer than
// it has (`e31 setup` on a cluster). It reports the replicas it had and
// whether it raised them.
func RaiseReplicas(ctx context.Context, js jetstream.JetStream, name string, want int) (int, bool, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0, false, fmt.Errorf("stream %s: %w", name, err)
	}
	cfg := st.CachedInfo().Config
	have := cfg.Replicas
	if have >= want {
		return have, false, nil
	}
	cfg.Replicas = want
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return have, false, fmt.Errorf("raise replicas of %s to %d: %w", name, want, err)
	}
	return have, true, nil
}

// ErrLogTooSmall is BoundLog refusing a bound at or below what the log
// holds with its reserve: it would refuse every event at once, releases
// of held jobs among them.
var ErrLogTooSmall = errors.New("the log holds more than that")

// BoundLog bounds the event log at limit bytes (<= 0: lifts the bound),
// full, it refuses new events and drops none. It returns what the log
// holds; a bound the log does not fit with its reserve (LogReserve) is
// ErrLogTooSmall.
func BoundLog(ctx context.Context, js jetstream.JetStream, limit int64) (uint64, error) {
	if limit <= 0 {
		limit = -1
	}
	str, err := js.Stream(ctx, Stream)
	if err != nil {
		return 0, fmt.Errorf("the log: %w", err)
	}
	info := str.CachedInfo()
	if limit > 0 && uint64(limit) <= info.State.Bytes+uint64(LogReserve(limit)) {
		return info.State.Bytes, ErrLogTooSmall
	}
	cfg := info.Config
	cfg.MaxBytes = limit
	cfg.Discard = jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return info.State.Bytes, fmt.Errorf("bound the log: %w", err)
	}
	return info.State.Bytes, nil
}
