package stage

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
)

// Open sets up the e31 streams and returns every submitter's store, as a
// service needs them: a submitter without a bucket gets one.
func Open(ctx context.Context, js jetstream.JetStream) (*Tenants, error) {
	if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
		return nil, err
	}
	return NewTenants(js, true), nil
}

// Stores gives the store of one submitter. Each submitter's staged data
// and returned output live apart (events.DataBucketFor), so that the
// permissions of the bus can give a submitter its own bucket and nothing
// of anyone else's. Implementations are safe for concurrent use.
type Stores interface {
	For(ctx context.Context, submitter string) (Store, error)
}

// Single gives every submitter the same store: for tests and single-user
// tools.
type Single struct{ Store }

// For implements Stores.
func (s Single) For(context.Context, string) (Store, error) { return s.Store, nil }

// Tenants opens each submitter's bucket once, creating it if it is missing
// and the caller may (services may; a submitter's bucket is made for it
// when its credentials are).
type Tenants struct {
	js     jetstream.JetStream
	create bool
	mu     sync.Mutex
	open   map[string]Store
}

// NewTenants returns the stores of js's submitters; with create, missing
// buckets are made, with as many replicas as the event log has.
func NewTenants(js jetstream.JetStream, create bool) *Tenants {
	return &Tenants{js: js, create: create, open: map[string]Store{}}
}

// ErrNoBucket means a submitter has no data bucket yet.
var ErrNoBucket = errors.New("stage: no data bucket for this submitter")

// For implements Stores.
func (t *Tenants) For(ctx context.Context, submitter string) (Store, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.open[submitter]; ok {
		return s, nil
	}
	if !events.ValidID(submitter) {
		return nil, fmt.Errorf("stage: %q is not a submitter id", submitter)
	}
	bucket := events.DataBucketFor(submitter)
	obs, err := t.js.ObjectStore(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && t.create {
		obs, err = OpenBucket(ctx, t.js, submitter)
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w %s (bucket %s)", ErrNoBucket, submitter, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("stage: open %s: %w", bucket, err)
	}
	s := NewObjectStore(obs, WithPullReads(t.js))
	t.open[submitter] = s
	return s, nil
}

// OpenBucket creates a submitter's data bucket if it is missing, with as
// many replicas as the event log and as many bytes as the submitter's
// max-data (pkg/limits), and returns it.
func OpenBucket(ctx context.Context, js jetstream.JetStream, submitter string) (jetstream.ObjectStore, error) {
	replicas := 1
	if st, err := js.Stream(ctx, events.Stream); err == nil {
		replicas = st.CachedInfo().Config.Replicas
	}
	cfg := events.DataBucketConfig(events.StreamOptions{Replicas: replicas})
	cfg.Bucket = events.DataBucketFor(submitter)
	cfg.Description = "e31 staged data and returned output of " + submitter + ", content addressed"
	// The bound is the bucket's own: the server refuses a put past it and
	// keeps what is stored (an object store discards new messages, never
	// old ones).
	lim, err := limits.ReadIfSet(ctx, js, submitter)
	if err != nil {
		return nil, fmt.Errorf("stage: create %s: %w", cfg.Bucket, err)
	}
	cfg.MaxBytes = lim.MaxDataBytes
	if cfg.MaxBytes == limits.Unlimited {
		cfg.MaxBytes = -1
	}
	obs, err := js.CreateObjectStore(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return js.ObjectStore(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("stage: create %s: %w", cfg.Bucket, err)
	}
	return obs, nil
}
