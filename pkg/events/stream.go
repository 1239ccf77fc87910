package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/retry"
)

// The one place that says where things are stored.
const (
	// Stream is the log of every job and node event: the source of truth.
	Stream = "E31"
	// PoisonStream keeps events a service could never handle, with the reason,
	// so that nothing is dropped silently.
	PoisonStream = "E31_POISON"
	// DataBucket names the object stores of staged data and returned output,
	// content addressed by digest: each submitter has its own,
	// DataBucketFor(submitter). The bucket of that name alone is for tests
	// and tools.
	DataBucket = "E31_DATA"

	// LeasesBucket is the KV bucket of leases: node.<name> for each live run
	// node and leader.<service> for the one instance that decides.
	LeasesBucket = "E31_LEASES"
	// DefaultLeaseTTL is how long a lease lives without renewal: how long a
	// dead node or scheduler goes unnoticed.
	DefaultLeaseTTL = 10 * time.Second

	// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id. Past it,
	// idempotent handlers are what keep a redelivery from acting twice.
	DuplicateWindow = 2 * time.Minute
)

// ValidID reports whether id can name a job or node: one NATS subject
// token, ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$. It is checked for every event
// decoded, so by hand rather than with a regular expression, which cost a
// tenth of the audit's replay.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 64 || id[0] == '_' || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// StreamOptions are the deployment choices for the streams.
type StreamOptions struct {
	// Replicas is 1 on one machine and 3 in a cluster.
	Replicas int
	// LeaseTTL is the lease time of the leases bucket; default DefaultLeaseTTL.
	LeaseTTL time.Duration
}

// LeasesBucketConfig is the configuration of the leases bucket. Its TTL is
// the lease time; markers make an expiry visible to watchers.
func LeasesBucketConfig(o StreamOptions) jetstream.KeyValueConfig {
	ttl := o.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	return jetstream.KeyValueConfig{
		Bucket:         LeasesBucket,
		Description:    "e31 leases: live run nodes and the deciding scheduler",
		History:        1,
		TTL:            ttl,
		LimitMarkerTTL: max(ttl, time.Second),
		Storage:        jetstream.FileStorage,
		Replicas:       max(o.Replicas, 1),
	}
}

// StreamConfig is the configuration of the event log.
func StreamConfig(o StreamOptions) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        Stream,
		Description: "e31 job and node events: the source of truth",
		Subjects:    []string{JobSubjects, NodeSubjects},
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
		Retention:   jetstream.LimitsPolicy,
		// Hold records are kept for ever, so the log is too.
		MaxAge:      0,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		Discard:     jetstream.DiscardNew,
		MaxMsgSize:  MaxBodyBytes + 4096,
		Duplicates:  DuplicateWindow,
		AllowDirect: true,
		// An event is a fact: nobody may delete one.
		DenyDelete: true,
		DenyPurge:  true,
	}
}

// PoisonStreamConfig is the configuration of the poison stream.
func PoisonStreamConfig(o StreamOptions) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        PoisonStream,
		Description: "e31 events a service could not handle, with the reason",
		Subjects:    []string{PoisonSubjects},
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
		MaxAge:      30 * 24 * time.Hour,
		// Anyone may publish junk that every service sets aside here: the
		// poison stream is bounded, and the oldest goes first. It is for
		// diagnosis; the log itself keeps every message.
		MaxBytes:   PoisonMaxBytes,
		Discard:    jetstream.DiscardOld,
		Duplicates: DuplicateWindow,
	}
}

// PoisonMaxBytes bounds the poison stream.
const PoisonMaxBytes = 256 << 20

// DataBucketFor is the object store of one submitter's staged data and
// returned output: kept apart from everyone else's, so that permissions can
// give each submitter its own and nothing more.
func DataBucketFor(submitter string) string { return DataBucket + "_" + submitter }

// DataBucketConfig is the configuration of an object store of data.
func DataBucketConfig(o StreamOptions) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      DataBucket,
		Description: "e31 staged data and returned output, content addressed",
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
	}
}

// Setup creates the streams and buckets that do not exist yet. It is
// idempotent, so every service calls it on start and none depends on
// another having run. It never changes a stream that exists: an operator
// who made the log three-way replicated must not have a service that was
// started with the defaults make it single again.
func Setup(ctx context.Context, js jetstream.JetStream, o StreamOptions) error {
	for _, cfg := range []jetstream.StreamConfig{StreamConfig(o), PoisonStreamConfig(o), TimerStreamConfig(o)} {
		if _, err := js.Stream(ctx, cfg.Name); err == nil {
			continue
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("set up stream %s: %w", cfg.Name, err)
		}
		if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("set up stream %s: %w", cfg.Name, err)
		}
	}
	if _, err := js.KeyValue(ctx, LeasesBucket); errors.Is(err, jetstream.ErrBucketNotFound) {
		if _, err := js.CreateKeyValue(ctx, LeasesBucketConfig(o)); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return fmt.Errorf("set up leases %s: %w", LeasesBucket, err)
		}
	} else if err != nil {
		return fmt.Errorf("set up leases %s: %w", LeasesBucket, err)
	}
	return nil
}

// WaitReady retries a first JetStream call until the server answers: a fresh
// cluster has no meta leader yet when it starts accepting connections.
func WaitReady(ctx context.Context, js jetstream.JetStream) error {
	err := retry.Do(ctx, retry.Ready, func() error {
		// Each try has its own short deadline: a request sent while the
		// cluster forms can go unanswered, and waiting for it until ctx's
		// own deadline would spend every later chance on it.
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(tctx)
		return err
	}, retry.If(retry.Always))
	if err != nil {
		return fmt.Errorf("jetstream not ready: %w", err)
	}
	return nil
}
