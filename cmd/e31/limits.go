package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/stage"
)

// limitFlags are `e31 setup`'s limit flags, as given: "" is not given.
type limitFlags struct {
	maxData, maxQueued, maxRate string
	allowImages                 []string
}

// policyEdit turns the flags given into an edit of a stored policy, or
// says which flag is wrong.
func (f limitFlags) policyEdit() (edit func(*limits.Policy), maxData *int64, err error) {
	var queued, rate *int
	if f.maxData != "" {
		n, err := parseLimit(f.maxData, func(s string) (int64, error) { return jobfile.ParseSize(s) })
		if err != nil {
			return nil, nil, usageErr("--max-data: %v", err)
		}
		maxData = &n
	}
	for _, c := range []struct {
		flag, value string
		to          **int
	}{{"--max-queued", f.maxQueued, &queued}, {"--max-rate", f.maxRate, &rate}} {
		if c.value == "" {
			continue
		}
		n, err := parseLimit(c.value, func(s string) (int64, error) {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("%q is not a whole number from 1 (or unlimited)", s)
			}
			return int64(n), nil
		})
		if err != nil {
			return nil, nil, usageErr("%s: %v", c.flag, err)
		}
		v := int(n)
		*c.to = &v
	}
	for _, im := range f.allowImages {
		if strings.TrimSpace(im) == "" || strings.ContainsAny(im, " \t\n") {
			return nil, nil, usageErr("--allow-image %q is not an image name", im)
		}
	}
	if maxData == nil && queued == nil && rate == nil && len(f.allowImages) == 0 {
		return nil, nil, nil
	}
	return func(p *limits.Policy) {
		if maxData != nil {
			p.MaxDataBytes = maxData
		}
		if queued != nil {
			p.MaxQueued = queued
		}
		if rate != nil {
			p.MaxRate = rate
		}
		for _, im := range f.allowImages {
			if !contains(p.Images, im) {
				p.Images = append(p.Images, im)
			}
		}
	}, maxData, nil
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// parseLimit reads "unlimited" (or "none") as limits.Unlimited, anything
// else with parse.
func parseLimit(s string, parse func(string) (int64, error)) (int64, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "unlimited", "none":
		return limits.Unlimited, nil
	}
	n, err := parse(s)
	if err == nil && n == 0 {
		return 0, fmt.Errorf("%q: a limit of 0 would refuse everything (say unlimited for none)", s)
	}
	return n, err
}

// setLimits writes the limits given on `e31 setup` for each submitter (or,
// with none named, for everyone) and bounds the data buckets they apply to.
// A bucket already holding more than a new max-data is refused before
// anything is written: lowering a bound never deletes what is stored.
func setLimits(ctx context.Context, out io.Writer, js jetstream.JetStream, replicas int, submitters []string, f limitFlags) error {
	kv, err := limits.Setup(ctx, js, replicas)
	if err != nil {
		return troubleErr(fmt.Errorf("setup: %w", err))
	}
	edit, maxData, err := f.policyEdit()
	if err != nil || edit == nil {
		return err
	}
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
			return err
		}
		for _, u := range buckets {
			if err := checkFits(ctx, js, u, *maxData); err != nil {
				return err
			}
		}
	}
	for _, key := range keys {
		p, err := limits.Change(ctx, kv, key, edit)
		if err != nil {
			return troubleErr(fmt.Errorf("setup: %w", err))
		}
		fmt.Fprintf(out, "%s %s: %s\n", limits.Bucket, key, describePolicy(p))
	}
	for _, u := range buckets {
		if err := setMaxBytes(ctx, js, u, *maxData); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: at most %s (max-data)\n", events.DataBucketFor(u), sizeOrUnlimited(*maxData))
	}
	return nil
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
			return nil, troubleErr(fmt.Errorf("setup: %w", err))
		}
		if own.MaxDataBytes == nil {
			out = append(out, u)
		}
	}
	if err := names.Error(); err != nil {
		return nil, troubleErr(fmt.Errorf("setup: list data buckets: %w", err))
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
		return troubleErr(fmt.Errorf("setup: data bucket of %s: %w", submitter, err))
	}
	if held := int64(st.CachedInfo().State.Bytes); maxData != limits.Unlimited && held > maxData {
		return usageErr("setup: %s's data bucket holds %s, more than --max-data %s: nothing changed (delete data first: e31 data rm)",
			submitter, humanBytes(held), humanBytes(maxData))
	}
	return nil
}

// errCodeInsufficientResources is the server's JSInsufficientResourcesErr:
// it cannot reserve a stream's MaxBytes on its store.
const errCodeInsufficientResources = 10047

// setMaxBytes bounds submitter's data bucket, making it if it is missing.
func setMaxBytes(ctx context.Context, js jetstream.JetStream, submitter string, maxData int64) error {
	if _, err := stage.OpenBucket(ctx, js, submitter); err != nil {
		return troubleErr(fmt.Errorf("setup: %w", err))
	}
	st, err := js.Stream(ctx, "OBJ_"+events.DataBucketFor(submitter))
	if err != nil {
		return troubleErr(fmt.Errorf("setup: data bucket of %s: %w", submitter, err))
	}
	cfg := st.CachedInfo().Config
	cfg.MaxBytes = maxData
	if maxData == limits.Unlimited {
		cfg.MaxBytes = -1
	}
	_, err = js.UpdateStream(ctx, cfg)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeInsufficientResources {
		return usageErr("setup: the NATS servers cannot reserve --max-data %s for %s's data bucket: the max-data of every submitter together must fit their file store (%v)",
			humanBytes(maxData), submitter, err)
	}
	if err != nil {
		return troubleErr(fmt.Errorf("setup: bound the data bucket of %s: %w", submitter, err))
	}
	return nil
}

func describePolicy(p limits.Policy) string {
	var parts []string
	if p.MaxDataBytes != nil {
		parts = append(parts, "max-data "+sizeOrUnlimited(*p.MaxDataBytes))
	}
	if p.MaxQueued != nil {
		parts = append(parts, "max-queued "+countOrUnlimited(*p.MaxQueued))
	}
	if p.MaxRate != nil {
		parts = append(parts, "max-rate "+countOrUnlimited(*p.MaxRate)+"/min")
	}
	if len(p.Images) > 0 {
		parts = append(parts, "images "+strings.Join(p.Images, ", "))
	}
	if len(parts) == 0 {
		return "the defaults"
	}
	return strings.Join(parts, "; ")
}

func sizeOrUnlimited(n int64) string {
	if n == limits.Unlimited {
		return "unlimited"
	}
	return humanBytes(n)
}

func countOrUnlimited(n int) string {
	if n == limits.Unlimited {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

// limitsReport is what `e31 limits --json` prints.
type limitsReport struct {
	limits.Limits
	// DataBytes is what the submitter's data bucket holds now.
	DataBytes int64 `json:"data_bytes"`
}

func limitsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Show your limits (data, queued jobs, submissions a minute, images) and your data usage",
		Long: `Show the limits the operator set for you (e31 setup --submitter NAME
--max-data SIZE --max-queued N --max-rate N --allow-image IMAGE), or the
defaults where none is set, and how much your data bucket holds now.

A job beyond --max-queued or --max-rate is rejected, with the limit named;
staging beyond --max-data fails, and nothing stored before is lost.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			gctx, done := c.guard(ctx, limits.DirectGetSubject(limits.DefaultKey), limits.DirectGetSubject(limits.Key(c.who.Name)))
			l, err := limits.ReadDirect(gctx, c.nc, c.who.Name)
			if err != nil {
				err = c.refused(gctx, "reading the limits of "+c.who.Name, err)
			}
			done()
			if err != nil {
				return err
			}
			r := limitsReport{Limits: l}
			// The bucket's own bound is what holds: show it, and what the
			// bucket holds.
			if st, err := c.js.Stream(ctx, "OBJ_"+events.DataBucketFor(c.who.Name)); err == nil {
				info := st.CachedInfo()
				r.DataBytes = int64(info.State.Bytes)
				r.MaxDataBytes = max(info.Config.MaxBytes, 0)
			}
			if asJSON {
				enc := json.NewEncoder(a.out)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			images := "none"
			if len(r.Images) > 0 {
				images = strings.Join(r.Images, ", ")
			}
			fmt.Fprintf(a.out, "submitter   %s\n", r.Submitter)
			fmt.Fprintf(a.out, "data        %s of %s (max-data)\n", humanBytes(r.DataBytes), sizeOrUnlimited(r.MaxDataBytes))
			fmt.Fprintf(a.out, "queued      at most %s jobs (max-queued)\n", countOrUnlimited(r.MaxQueued))
			fmt.Fprintf(a.out, "rate        at most %s jobs a minute (max-rate)\n", countOrUnlimited(r.MaxRate))
			fmt.Fprintf(a.out, "images      %s\n", images)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// dataFull is the error for staging that did not fit the submitter's
// max-data: which limit, how much the bucket holds, and what to do.
func (c *client) dataFull(ctx context.Context, what string) error {
	name := c.who.Name
	held, bound := "", "its max-data"
	if st, err := c.js.Stream(ctx, "OBJ_"+events.DataBucketFor(name)); err == nil {
		info := st.CachedInfo()
		held = ", and holds " + humanBytes(int64(info.State.Bytes))
		if info.Config.MaxBytes > 0 {
			bound = humanBytes(info.Config.MaxBytes) + " (max-data)"
		}
	}
	return &exitError{exitUsage, fmt.Errorf("%s: the data store of %s is full: it may hold at most %s%s; nothing stored before was lost. "+
		"Delete what you no longer need (e31 data ls, e31 data rm ID) or ask the operator for more (e31 setup --submitter %s --max-data SIZE)",
		what, name, bound, held, name)}
}
