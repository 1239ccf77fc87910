package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// Stream is the stream behind Bucket.
const Stream = "KV_" + Bucket

// BucketConfig is the configuration of the policy bucket.
func BucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      Bucket,
		Description: "e31 limits and allowed images, per submitter and for everyone",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// Setup returns the policy bucket, creating it if it is missing (with
// replicas copies). It never changes a bucket that exists.
func Setup(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := events.OpenBucket(ctx, js, BucketConfig(replicas))
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	return kv, nil
}

// Get reads the policy under key; a key never set is an empty policy.
func Get(ctx context.Context, kv jetstream.KeyValue, key string) (Policy, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Policy{}, 0, nil
	}
	if err != nil {
		return Policy{}, 0, fmt.Errorf("limits: read %s: %w", key, err)
	}
	p, err := Decode(e.Value())
	return p, e.Revision(), err
}

// Read gives submitter's effective limits.
func Read(ctx context.Context, kv jetstream.KeyValue, submitter string) (Limits, error) {
	def, _, err := Get(ctx, kv, DefaultKey)
	if err != nil {
		return Limits{}, err
	}
	own, _, err := Get(ctx, kv, Key(submitter))
	if err != nil {
		return Limits{}, err
	}
	return Resolve(submitter, def, own), nil
}

// ReadIfSet is Read on the bucket if it exists, and the defaults if it
// does not: limits nobody set are the built-in ones.
func ReadIfSet(ctx context.Context, js jetstream.JetStream, submitter string) (Limits, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return Resolve(submitter, Policy{}, Policy{}), nil
	}
	if err != nil {
		return Limits{}, fmt.Errorf("limits: open %s: %w", Bucket, err)
	}
	return Read(ctx, kv, submitter)
}

// Change applies edit to the policy under key, compare-and-set, so that
// two operators changing different limits at once both have their way.
func Change(ctx context.Context, kv jetstream.KeyValue, key string, edit func(*Policy)) (Policy, error) {
	for {
		p, rev, err := Get(ctx, kv, key)
		if err != nil {
			return p, err
		}
		edit(&p)
		if rev == 0 {
			_, err = kv.Create(ctx, key, p.Encode())
		} else {
			_, err = kv.Update(ctx, key, p.Encode(), rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return p, fmt.Errorf("limits: write %s: %w", key, err)
		}
		return p, nil
	}
}

// DirectGetSubject is the subject on which the last value of key is read
// with a direct get on the bucket's stream: all a submitter may do with
// the bucket, for its own key and the default (auth.LimitsSubjects).
func DirectGetSubject(key string) string {
	return "$JS.API.DIRECT.GET." + Stream + ".$KV." + Bucket + "." + key
}

// ReadDirect gives submitter's limits with direct gets alone, as a
// submitter reads them: it may not open the bucket.
func ReadDirect(ctx context.Context, nc *nats.Conn, submitter string) (Limits, error) {
	var ps [2]Policy
	for i, key := range []string{DefaultKey, Key(submitter)} {
		m, err := nc.RequestWithContext(ctx, DirectGetSubject(key), nil)
		if err != nil {
			return Limits{}, fmt.Errorf("limits: read %s: %w", key, err)
		}
		switch status := m.Header.Get("Status"); {
		case status == "404":
			continue
		case status != "":
			return Limits{}, fmt.Errorf("limits: read %s: %s %s", key, status, m.Header.Get("Description"))
		}
		if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			continue
		}
		if ps[i], err = Decode(m.Data); err != nil {
			return Limits{}, err
		}
	}
	return Resolve(submitter, ps[0], ps[1]), nil
}

// Book is every submitter's limits as the bucket has them now, kept up
// to date by watching it: what SUBMIT and the nodes decide by, without a
// round trip per job. It is safe for concurrent use.
type Book struct {
	mu       sync.RWMutex
	policies map[string]Policy
	done     chan struct{}
}

// Watch reads the bucket (creating it if missing) and returns a Book of
// it, kept current until ctx ends.
func Watch(ctx context.Context, js jetstream.JetStream) (*Book, error) {
	kv, err := Setup(ctx, js, 1)
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("limits: watch %s: %w", Bucket, err)
	}
	b := &Book{policies: map[string]Policy{}, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(b.done)
		defer w.Stop() //nolint:errcheck // ends the watch; nothing to do if it fails
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					close(ready)
					continue
				}
				b.apply(e.Key(), e.Operation(), e.Value())
			case <-ctx.Done():
				return
			}
		}
	}()
	select {
	case <-ready:
		return b, nil
	case <-b.done:
		return nil, fmt.Errorf("limits: read %s: the watch ended: %w", Bucket, ctx.Err())
	}
}

// Done is closed once the Book stops following the bucket: after the
// context given to Watch ends. Its owner waits for it.
func (b *Book) Done() <-chan struct{} { return b.done }

func (b *Book) apply(key string, op jetstream.KeyValueOp, value []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if op != jetstream.KeyValuePut {
		delete(b.policies, key)
		return
	}
	p, err := Decode(value)
	if err != nil {
		// An unreadable policy is no policy: the defaults apply, and `e31
		// setup` writes it again.
		delete(b.policies, key)
		return
	}
	b.policies[key] = p
}

// For gives submitter's limits.
func (b *Book) For(submitter string) Limits {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return Resolve(submitter, b.policies[DefaultKey], b.policies[Key(submitter)])
}

// Limits implements the executors' policy lookup (container.Images) from
// the Book.
func (b *Book) Limits(_ context.Context, submitter string) (Limits, error) {
	return b.For(submitter), nil
}

// Lookup reads a submitter's limits from the bucket at each call: for a
// node, which checks the images of the few jobs that name one and needs no
// watch kept for that.
type Lookup struct{ JS jetstream.JetStream }

// Limits gives submitter's limits as the bucket has them now.
func (l Lookup) Limits(ctx context.Context, submitter string) (Limits, error) {
	return ReadIfSet(ctx, l.JS, submitter)
}
