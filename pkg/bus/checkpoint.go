package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// A checkpoint is where a projection of the log may start reading it from
// rather than from its first message, kept in one key of a KV bucket of
// the service's own (RENT's pool, OUTPUT's retention). Each service says
// what its checkpoint holds; these two functions are what is the same for
// all: reading one and checking it is of this log, and writing one as the
// projection goes.

// Mark is what every checkpoint says: which log it is of, where to read
// from, and how far the projection had read.
type Mark struct {
	// Log is when the log was made (its stream's creation time): a
	// checkpoint of another log, one made anew since, says nothing of
	// this one.
	Log time.Time `json:"log"`
	// From is the first sequence the projection needs to read.
	From uint64 `json:"from"`
	// Applied is the last sequence the projection had applied: From-1 or
	// later.
	Applied uint64 `json:"applied"`
}

// CheckpointEvery is how often a service writes its checkpoint
// (KeepCheckpoint): one that starts reads what was stored since, besides
// what its projection keeps.
const CheckpointEvery = 30 * time.Second

// mark is the Mark of a checkpoint that embeds one.
func (m Mark) mark() Mark { return m }

// marked is a checkpoint: what embeds a Mark.
type marked interface{ mark() Mark }

// LoadCheckpoint reads the checkpoint under key in kv into c (a pointer
// to a service's checkpoint, which embeds a Mark), and reports whether it may be started from: it is of this
// log, and its From is within it and past the first message. A missing key
// is false, as is one that does not read or is of another log, which is
// logged (what is made from the whole log instead: "the pool", say). made
// is when the log was made, which the checkpoints written must say (see
// KeepCheckpoint). Any checkpoint of this log is true, an older one too:
// one a lagging replica answers with only costs more reading.
func LoadCheckpoint(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, c marked, log *slog.Logger, what string) (ok bool, made time.Time, err error) {
	stream, err := js.Stream(ctx, events.Stream)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("the log: %w", err)
	}
	info := stream.CachedInfo()
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, info.Created, nil
	}
	if err != nil {
		return false, time.Time{}, fmt.Errorf("read the checkpoint: %w", err)
	}
	if err := json.Unmarshal(e.Value(), c); err != nil {
		log.Warn("the checkpoint does not read: "+what+" is made from the whole log", "err", err)
		return false, info.Created, nil
	}
	if m := c.mark(); !m.Log.Equal(info.Created) || m.From > info.State.LastSeq+1 || m.From <= 1 {
		log.Warn("the checkpoint is not of this log: "+what+" is made from the whole log",
			"checkpoint_log", m.Log, "log", info.Created, "from", m.From, "last", info.State.LastSeq)
		return false, info.Created, nil
	}
	return true, info.Created, nil
}

// KeepCheckpoint writes what take returns (a checkpoint, as JSON) under
// key in kv every every while lead says so (nil: always), and once more
// when ctx ends, whatever lead says: a checkpoint of any instance is true,
// and the one that starts next reads the less for it. A checkpoint the
// same as the last written is not written again. It returns when ctx
// ends.
func KeepCheckpoint(ctx context.Context, kv jetstream.KeyValue, key string, every time.Duration, lead func() bool, take func() any, log *slog.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var written []byte
	write := func(ctx context.Context) {
		body, err := json.Marshal(take())
		if err != nil || bytes.Equal(body, written) {
			return
		}
		if _, err := kv.Put(ctx, key, body); err != nil {
			log.Warn("could not write the checkpoint", "err", err)
			return
		}
		written = body
	}
	for {
		if lead == nil || lead() {
			write(ctx)
		}
		select {
		case <-ctx.Done():
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			write(stop)
			cancel()
			return
		case <-tick.C:
		}
	}
}
