package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/retry"
	"github.com/e31net/e31/stack"
)

func setupCmd(a *app) *cobra.Command {
	var replicas int
	var leaseTTL, timeout time.Duration
	var logMax string
	var submitters []string
	var maxData, maxQueued, maxRate string
	var images []string
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Create e31's streams and buckets on a NATS cluster, with the replicas wanted",
		Long:  help("setup"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if replicas < 1 || replicas > 5 {
				return usageErr("--replicas must be from 1 to 5")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			nc, js, err := connect.Dial(ctx, a.connectConfig("e31-setup"))
			if err != nil {
				return troubleErr(err)
			}
			defer nc.Close()
			// A cluster just started takes the streams once its servers
			// know each other: a minute of silence would look like a hang.
			waiting := retry.OnRetry(func(err error, in time.Duration) {
				a.log.Warn("setup: the NATS cluster does not take it yet; trying again", "err", err, "in", in.Round(time.Millisecond))
			})
			if err := stack.Provision(ctx, js, events.StreamOptions{Replicas: replicas, LeaseTTL: leaseTTL}, waiting); err != nil {
				return troubleErr(err)
			}
			if logMax != "" {
				if err := setLogMaxBytes(ctx, a, js, logMax); err != nil {
					return err
				}
			}
			found, err := stack.RaiseReplicas(ctx, js, replicas, waiting)
			for _, r := range found {
				if r.Raised {
					fmt.Fprintf(a.out, "%s: replicas raised from %d to %d\n", r.Stream, r.Had, replicas)
				} else {
					fmt.Fprintf(a.out, "%s: %d replica(s)\n", r.Stream, r.Had)
				}
			}
			if err != nil {
				return troubleErr(err)
			}
			edit, err := client.LimitEdit(maxData, maxQueued, maxRate, images)
			if err != nil {
				return usageErr("--%v", err)
			}
			for _, u := range submitters {
				if !events.ValidID(u) {
					return usageErr("--submitter %q is not a submitter id", u)
				}
				if err := stack.OpenDataBucket(ctx, js, u, waiting); err != nil {
					return troubleErr(err)
				}
				fmt.Fprintf(a.out, "%s: the data bucket of %s\n", events.DataBucketFor(u), u)
			}
			// The limits given, for each submitter named or for everyone.
			set, err := client.SetLimits(ctx, js, replicas, submitters, edit)
			if werr := set.WriteText(a.out); err == nil {
				err = werr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&replicas, "replicas", 1, "copies of every stream: 1 on one server, 3 on a three-server cluster")
	f.StringVar(&logMax, "log-max-bytes", "", "what the event log may hold (e.g. 500GiB, or 'unlimited': the server's store); full, it refuses new events and drops none, and SUBMIT refuses new jobs an eighth short of it")
	f.DurationVar(&leaseTTL, "lease-ttl", events.DefaultLeaseTTL, "how long a node or scheduler lives without renewing its lease (only when the bucket is created)")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the cluster to accept the streams")
	f.StringArrayVar(&submitters, "submitter", nil, "also make this submitter's data bucket, and set the limits given for it (repeatable)")
	f.StringVar(&maxData, "max-data", "", "what a submitter's data bucket may hold, e.g. 50GiB, or unlimited (default unlimited)")
	f.StringVar(&maxQueued, "max-queued", "", "jobs a submitter may have submitted and not yet over, or unlimited (default 200000)")
	f.StringVar(&maxRate, "max-rate", "", "jobs a submitter may submit a minute, or unlimited (default 120000)")
	f.StringArrayVar(&images, "allow-image", nil, "a container image jobs may name; 'prefix*' for every image it starts (repeatable)")
	return cmd
}

// setLogMaxBytes bounds the event log at size, or lifts the bound
// ("unlimited"), and says so.
func setLogMaxBytes(ctx context.Context, a *app, js jetstream.JetStream, size string) error {
	limit := int64(-1)
	if size != "unlimited" {
		n, err := jobfile.ParseSize(size)
		if err != nil || n <= 0 {
			return usageErr("--log-max-bytes %q is not a size", size)
		}
		limit = n
	}
	held, err := events.BoundLog(ctx, js, limit)
	if errors.Is(err, events.ErrLogTooSmall) {
		return usageErr("--log-max-bytes %s: the log holds %d bytes already; give it more than that and its reserve (%d bytes)", size, held, events.LogReserve(limit))
	}
	if err != nil {
		return troubleErr(fmt.Errorf("setup: %w", err))
	}
	fmt.Fprintf(a.out, "%s: may hold %s bytes (it holds %d)\n", events.Stream, size, held)
	return nil
}
