package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/stage"
)

// LimitsReport is a submitter's limits and how much its data bucket holds:
// the form of `e31 limits --json`.
type LimitsReport struct {
	limits.Limits
	// DataBytes is what the submitter's data bucket holds now.
	DataBytes int64 `json:"data_bytes"`
}

// Limits reads the limits the operator set for the client's identity (or
// the defaults where none is set) and how much its data bucket holds.
func (c *Client) Limits(ctx context.Context) (LimitsReport, error) {
	name := c.who.Name
	gctx, done := c.Guard(ctx, limits.DirectGetSubject(limits.DefaultKey), limits.DirectGetSubject(limits.Key(name)))
	l, err := limits.ReadDirect(gctx, c.nc, name)
	if err != nil {
		err = c.refused(gctx, "reading the limits of "+name, err)
	}
	done()
	if err != nil {
		return LimitsReport{}, err
	}
	r := LimitsReport{Limits: l}
	// The bucket's own bound is what holds: report it, and what the bucket
	// holds.
	if st, err := c.js.Stream(ctx, "OBJ_"+events.DataBucketFor(name)); err == nil {
		info := st.CachedInfo()
		r.DataBytes = int64(info.State.Bytes)
		r.MaxDataBytes = max(info.Config.MaxBytes, 0)
	}
	return r, nil
}

// LimitsSet is what SetLimits changed.
type LimitsSet struct {
	// Policies are the policies written, by key, in the order written.
	Policies []KeyPolicy
	// Bounded are the submitters whose data bucket took the new max-data,
	// MaxDataBytes, in the order bounded.
	Bounded      []string
	MaxDataBytes *int64
}

// KeyPolicy is a policy as written under its key in limits.Bucket.
type KeyPolicy struct {
	Key    string
	Policy limits.Policy
}

// SetLimits changes, as e says, the limits of each submitter (or, with
// none named, the default) and bounds the data buckets a new
// e.MaxDataBytes applies to. It is the operator's: js must be the
// operator's. A bucket already holding more than that is refused
// (ErrInvalid) before anything is written: lowering a bound never deletes
// what is stored. It returns what it changed, also when it fails part way.
func SetLimits(ctx context.Context, js jetstream.JetStream, replicas int, submitters []string, e limits.Edit) (LimitsSet, error) {
	set := LimitsSet{MaxDataBytes: e.MaxDataBytes}
	kv, err := limits.Setup(ctx, js, replicas)
	if err != nil {
		return set, fmt.Errorf("setup: %w", err)
	}
	if e.Empty() {
		return set, nil
	}
	edit, maxData := e.Apply, e.MaxDataBytes
	keys := []string{limits.DefaultKey}
	if len(submitters) > 0 {
		keys = keys[:0]
		for _, u := range submitters {
			keys = append(keys, limits.Key(u))
		}
	}
	var buckets []string // the submitters whose bucket takes the new max-data
	if maxData != nil {
		buckets, err = boundBuckets(ctx, kv, js, submitters)
		if err != nil {
			return set, err
		}
		for _, u := range buckets {
			if err := checkFits(ctx, js, u, *maxData); err != nil {
				return set, err
			}
		}
	}
	for _, key := range keys {
		p, err := limits.Change(ctx, kv, key, edit)
		if err != nil {
			return set, fmt.Errorf("setup: %w", err)
		}
		set.Policies = append(set.Policies, KeyPolicy{Key: key, Policy: p})
	}
	for _, u := range buckets {
		if err := setMaxBytes(ctx, js, u, *maxData); err != nil {
			return set, err
		}
		set.Bounded = append(set.Bounded, u)
	}
	return set, nil
}

// boundBuckets is whose existing data buckets a new max-data bounds: the
// submitters named, or, for the default, every submitter with a bucket
// and no max-data of its own.
func boundBuckets(ctx context.Context, kv jetstream.KeyValue, js jetstream.JetStream, submitters []string) ([]string, error) {
	if len(submitters) > 0 {
		return submitters, nil
	}
	var out []string
	names := js.ObjectStoreNames(ctx)
	for name := range names.Name() {
		u, ok := strings.CutPrefix(name, events.DataBucket+"_")
		if !ok || !events.ValidID(u) {
			continue
		}
		own, _, err := limits.Get(ctx, kv, limits.Key(u))
		if err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
		if own.MaxDataBytes == nil {
			out = append(out, u)
		}
	}
	if err := names.Error(); err != nil {
		return nil, fmt.Errorf("setup: list data buckets: %w", err)
	}
	return out, nil
}

// checkFits refuses a max-data below what submitter's bucket holds.
func checkFits(ctx context.Context, js jetstream.JetStream, submitter string, maxData int64) error {
	st, err := js.Stream(ctx, "OBJ_"+events.DataBucketFor(submitter))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("setup: data bucket of %s: %w", submitter, err)
	}
	if held := int64(st.CachedInfo().State.Bytes); maxData != limits.Unlimited && held > maxData {
		return kind(ErrInvalid, fmt.Errorf("setup: %s's data bucket holds %s, more than --max-data %s: nothing changed (delete data first: e31 data rm)",
			submitter, HumanBytes(held), HumanBytes(maxData)))
	}
	return nil
}

// errCodeInsufficientResources is the server's JSInsufficientResourcesErr:
// it cannot reserve a stream's MaxBytes on its store.
const errCodeInsufficientResources = 10047

// setMaxBytes bounds submitter's data bucket, making it if it is missing.
func setMaxBytes(ctx context.Context, js jetstream.JetStream, submitter string, maxData int64) error {
	if _, err := stage.OpenBucket(ctx, js, submitter); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	st, err := js.Stream(ctx, "OBJ_"+events.DataBucketFor(submitter))
	if err != nil {
		return fmt.Errorf("setup: data bucket of %s: %w", submitter, err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxBytes = maxData
	if maxData == limits.Unlimited {
		cfg.MaxBytes = -1
	}
	_, err = js.UpdateStream(ctx, cfg)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeInsufficientResources {
		return kind(ErrInvalid, fmt.Errorf("setup: the NATS servers cannot reserve --max-data %s for %s's data bucket: the max-data of every submitter together must fit their file store (%v)",
			HumanBytes(maxData), submitter, err))
	}
	if err != nil {
		return fmt.Errorf("setup: bound the data bucket of %s: %w", submitter, err)
	}
	return nil
}
