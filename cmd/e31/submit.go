package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/stage"
)

func submitCmd(a *app) *cobra.Command {
	var wait, asJSON, quiet, waitForNode bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "submit FILE",
		Short: "Stage a job's data and submit it; prints the job id",
		Long:  help("submit"),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			job, err := jobfile.ParseFile(args[0])
			if err != nil {
				return &exitError{exitUsage, err}
			}
			job.Spec.WaitForNode = job.Spec.WaitForNode || waitForNode
			p := progressFor(a.errOut, quiet || asJSON)
			return a.with(ctx, func(c *client.Client) error {
				if job.Sweep != nil {
					return a.submitSweep(ctx, c, job, p, wait, timeout, asJSON)
				}
				id, err := c.Submit(ctx, job, p)
				if err != nil {
					return err
				}
				switch {
				case !wait && asJSON:
					return json.NewEncoder(a.out).Encode(map[string]string{"id": id})
				case !wait:
					_, err = fmt.Fprintln(a.out, id)
					return err
				case !asJSON:
					fmt.Fprintln(a.errOut, "submitted", id)
				}
				return a.waitAndPrint(ctx, c, id, timeout, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the job to end and print its hold record")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bars")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait: give up waiting after this long (0: no limit)")
	cmd.Flags().BoolVar(&waitForNode, "wait-for-node", false, "if no node in the pool could ever hold the job, wait for one to join instead of being rejected")
	return cmd
}

// submitSweep submits one job per sweep value, sharing the staged data. It
// prints the sweep id (and the job ids with --json); with wait, it waits
// for them all and summarizes.
func (a *app) submitSweep(ctx context.Context, c *client.Client, job *jobfile.Job, p stage.Progress, wait bool, timeout time.Duration, asJSON bool) error {
	sweep, ids, err := c.SubmitSweep(ctx, job, p)
	if err != nil {
		return err
	}
	switch {
	case !wait && asJSON:
		return json.NewEncoder(a.out).Encode(map[string]any{"id": sweep, "jobs": ids})
	case !wait:
		_, err = fmt.Fprintln(a.out, sweep)
		return err
	}
	fmt.Fprintf(a.errOut, "submitted sweep %s: %d jobs\n", sweep, len(ids))
	return a.waitSweep(ctx, c, sweep, timeout, asJSON)
}
