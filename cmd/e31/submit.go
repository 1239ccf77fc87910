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
	var wait, asJSON, quiet, waitForNode, failed bool
	var timeout time.Duration
	var again string
	cmd := &cobra.Command{
		Use:     "submit FILE",
		Short:   "Stage a job's data and submit it; prints the job id",
		Long:    help("submit"),
		Example: "  e31 submit job.yaml --wait\n  e31 submit --again SWEEP --failed [fixed.yaml]",
		Args:    cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if again != "" {
				if !failed {
					return usageErr("--again %s: say which of its jobs to submit again: --failed (those that did not succeed)", again)
				}
				file := ""
				if len(args) == 1 {
					file = args[0]
				}
				return a.with(ctx, func(c *client.Client) error {
					return a.submitAgain(ctx, c, again, file, quiet, wait, timeout, asJSON)
				})
			}
			if len(args) != 1 {
				return usageErr("submit takes a job file (or --again SWEEP --failed)")
			}
			if failed {
				return usageErr("--failed goes with --again SWEEP")
			}
			job, err := parseJobFile(args[0])
			if err != nil {
				return err
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
	cmd.Flags().StringVar(&again, "again", "", "submit again jobs of this sweep, into the same sweep (with --failed; FILE, if given, replaces their job file)")
	cmd.Flags().BoolVar(&failed, "failed", false, "with --again: the sweep's jobs that ended without success")
	return cmd
}

// parseJobFile reads a job file; "" is none. A file with problems is a
// usage error, with every problem and where it is.
func parseJobFile(path string) (*jobfile.Job, error) {
	if path == "" {
		return nil, nil
	}
	job, err := jobfile.ParseFile(path)
	if err != nil {
		return nil, &exitError{exitUsage, err}
	}
	return job, nil
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
