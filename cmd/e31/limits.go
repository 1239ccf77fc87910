package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/limits"
)

// limitFlags are `e31 setup`'s limit flags, as given: "" is not given.
type limitFlags struct {
	maxData, maxQueued, maxRate string
	allowImages                 []string
}

// policyEdit turns the flags given into an edit of a stored policy (nil
// for none), or says which flag is wrong.
func (f limitFlags) policyEdit() (edit func(*limits.Policy), maxData *int64, err error) {
	e := limits.Edit{Images: f.allowImages}
	if f.maxData != "" {
		n, err := limits.ParseLimit(f.maxData, func(s string) (int64, error) { return jobfile.ParseSize(s) })
		if err != nil {
			return nil, nil, usageErr("--max-data: %v", err)
		}
		e.MaxDataBytes = &n
	}
	for _, c := range []struct {
		flag, value string
		to          **int
	}{{"--max-queued", f.maxQueued, &e.MaxQueued}, {"--max-rate", f.maxRate, &e.MaxRate}} {
		if c.value == "" {
			continue
		}
		n, err := limits.ParseLimit(c.value, func(s string) (int64, error) {
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
	if e.Empty() {
		return nil, nil, nil
	}
	return e.Apply, e.MaxDataBytes, nil
}

// setLimits writes the limits given on `e31 setup` for each submitter (or,
// with none named, for everyone) and bounds the data buckets they apply
// to, saying what it did (see client.SetLimits).
func setLimits(ctx context.Context, out io.Writer, js jetstream.JetStream, replicas int, submitters []string, f limitFlags) error {
	edit, maxData, err := f.policyEdit()
	if err != nil {
		return err
	}
	set, err := client.SetLimits(ctx, js, replicas, submitters, edit, maxData)
	for _, p := range set.Policies {
		fmt.Fprintf(out, "%s %s: %s\n", limits.Bucket, p.Key, describePolicy(p.Policy))
	}
	for _, u := range set.Bounded {
		fmt.Fprintf(out, "%s: at most %s (max-data)\n", events.DataBucketFor(u), sizeOrUnlimited(*maxData))
	}
	return err
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

func limitsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Show your limits (data, queued jobs, submissions a minute, images) and your data usage",
		Long:  help("limits"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			return a.with(ctx, func(c *client.Client) error {
				r, err := c.Limits(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(a.out, r)
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
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
