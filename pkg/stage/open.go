package stage

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// Open sets up the e31 streams and returns the JetStream object store that
// holds staged data and returned output.
func Open(ctx context.Context, js jetstream.JetStream) (Store, error) {
	if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
		return nil, err
	}
	obs, err := js.ObjectStore(ctx, events.DataBucket)
	if err != nil {
		return nil, fmt.Errorf("stage: open %s: %w", events.DataBucket, err)
	}
	return NewObjectStore(obs), nil
}
