package main

import (
	"context"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
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
	e, err := client.LimitEdit(f.maxData, f.maxQueued, f.maxRate, f.allowImages)
	switch {
	case err != nil:
		return nil, nil, usageErr("--%v", err)
	case e.Empty():
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
	if werr := set.WriteText(out, maxData); err == nil {
		err = werr
	}
	return err
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
				return a.show(asJSON, r, r.WriteText)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
