package stack

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/retry"
	"github.com/e31net/e31/pkg/stage"
)

// Setting up a deployed e31 (`e31 setup`): what a Stack makes for itself
// with one replica, made on a NATS cluster with the replicas wanted.
// Right after a cluster starts, creating a replicated stream can fail
// until every peer is known and a meta leader elected: each step is
// retried (retry.Setup) until its context ends.

// Streams are every stream e31 keeps, the buckets included (a KV bucket is
// the stream KV_<bucket>). Each submitter's data bucket is made when it is
// first needed, with as many replicas as the event log.
var Streams = append(slices.Clone(events.Streams), limits.Stream)

// Provision creates the streams and buckets that are missing, as o says:
// those every service sets up (events.Setup), OUTPUT's bucket, which
// OUTPUT alone makes otherwise, and the limits' bucket.
// opts add to how each step is retried: retry.OnRetry, to say what it
// waits for.
func Provision(ctx context.Context, js jetstream.JetStream, o events.StreamOptions, opts ...retry.Option) error {
	for _, step := range []func() error{
		func() error { return events.Setup(ctx, js, o) },
		func() error { _, err := events.LinkNodeLeases(ctx, js); return err },
		func() error { _, err := events.OpenBucket(ctx, js, events.OutputBucketConfig(o)); return err },
		func() error { _, err := limits.Setup(ctx, js, max(o.Replicas, 1)); return err },
	} {
		if err := retry.Do(ctx, retry.Setup, step, always(opts)...); err != nil {
			return setupErr(err)
		}
	}
	return nil
}

// Replicas is what RaiseReplicas found of one stream.
type Replicas struct {
	Stream string
	// Had is how many replicas it had; Raised, whether it has more now.
	Had    int
	Raised bool
}

// RaiseReplicas gives every stream of Streams at least want replicas,
// never fewer than it has (events.RaiseReplicas). It returns what it found
// of each, in the order of Streams, also when it fails part way.
func RaiseReplicas(ctx context.Context, js jetstream.JetStream, want int, opts ...retry.Option) ([]Replicas, error) {
	var found []Replicas
	for _, name := range Streams {
		r := Replicas{Stream: name}
		err := retry.Do(ctx, retry.Setup, func() (err error) {
			r.Had, r.Raised, err = events.RaiseReplicas(ctx, js, name, want)
			return err
		}, always(opts)...)
		if err != nil {
			return found, setupErr(err)
		}
		found = append(found, r)
	}
	return found, nil
}

// OpenDataBucket makes submitter's data bucket if it is missing: a
// submitter's credentials let it use its bucket, never create one.
func OpenDataBucket(ctx context.Context, js jetstream.JetStream, submitter string, opts ...retry.Option) error {
	if err := retry.Do(ctx, retry.Setup, func() error { _, err := stage.OpenBucket(ctx, js, submitter); return err }, always(opts)...); err != nil {
		return setupErr(err)
	}
	return nil
}

// ErrNotClustered is a setup asking a NATS server that is not part of a
// cluster for more than one replica. The server's answer never changes,
// so it is not retried.
var ErrNotClustered = errors.New("the NATS server is not part of a cluster: more than one replica needs a cluster of at least that many servers (one server takes --replicas 1)")

// errReplicasNotSupported is the server's code for that answer
// (JSStreamReplicasNotSupportedErr).
const errReplicasNotSupported = 10074

// always is opts, retrying whatever the error but ErrNotClustered's: on a
// cluster just started, any other may pass.
func always(opts []retry.Option) []retry.Option {
	return append([]retry.Option{retry.If(func(err error) bool { return !notClustered(err) })}, opts...)
}

func notClustered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errReplicasNotSupported
}

// setupErr is a step's last error, named ErrNotClustered where it is.
func setupErr(err error) error {
	if notClustered(err) {
		return fmt.Errorf("setup: %w (%v)", ErrNotClustered, err)
	}
	return fmt.Errorf("setup: %w", err)
}
