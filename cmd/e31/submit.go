package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/stage"
)

func submitCmd(a *app) *cobra.Command {
	var wait, asJSON, quiet, waitForNode bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "submit FILE",
		Short: "Stage a job's data and submit it; prints the job id",
		Long: `Read a job file (YAML or JSON), upload the data it declares into the store
(content addressed: data already stored is not sent again), and submit the job.
Prints the job id, or {"id": ...} with --json. With --wait, waits for the job
to end and prints its hold record; the exit status is then 0 only if the job
succeeded.

A job file that is not valid is refused here, with every problem and where it
is; such a job never reaches the system.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			job, err := jobfile.ParseFile(args[0])
			if err != nil {
				return &exitError{exitUsage, err}
			}
			job.Spec.WaitForNode = job.Spec.WaitForNode || waitForNode
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			if job.Sweep != nil {
				return c.submitSweep(ctx, job, progressFor(a.errOut, quiet || asJSON), wait, timeout, asJSON)
			}
			id, err := c.submit(ctx, job, progressFor(a.errOut, quiet || asJSON))
			if err != nil {
				return err
			}
			if !wait {
				if asJSON {
					return json.NewEncoder(a.out).Encode(map[string]string{"id": id})
				}
				fmt.Fprintln(a.out, id)
				return nil
			}
			if !asJSON {
				fmt.Fprintln(a.errOut, "submitted", id)
			}
			return c.waitAndPrint(ctx, id, timeout, asJSON)
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the job to end and print its hold record")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bars")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait: give up waiting after this long (0: no limit)")
	cmd.Flags().BoolVar(&waitForNode, "wait-for-node", false, "if no node in the pool could ever hold the job, wait for one to join instead of being rejected")
	return cmd
}

// submit stages the job's local data and publishes its request. The id is
// new (time ordered), and the request is stored only if no event exists
// for it yet, so it can never land on another job.
func (c *client) submit(ctx context.Context, job *jobfile.Job, p stage.Progress) (string, error) {
	spec, err := c.stage(ctx, job, p)
	if err != nil {
		return "", err
	}
	u, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	id := u.String()
	req := events.JobRequested{Submitter: c.who.Name, Spec: spec}
	if _, err := c.append(ctx, id, &req, bus.ExpectLast(0)); err != nil {
		if errors.Is(err, bus.ErrConflict) {
			return "", troubleErr(fmt.Errorf("job id %s is already in use; submit again", id))
		}
		return "", err
	}
	return id, nil
}

// submitSweep submits one job per sweep value, sharing the staged data: the
// jobs are <sweep id>-<index>. It prints the sweep id (and the job ids with
// --json); with wait, it waits for them all and summarizes.
func (c *client) submitSweep(ctx context.Context, job *jobfile.Job, p stage.Progress, wait bool, timeout time.Duration, asJSON bool) error {
	spec, err := c.stage(ctx, job, p)
	if err != nil {
		return err
	}
	sweep := uuid.Must(uuid.NewV7()).String()
	ids := make([]string, len(job.Sweep))
	pub := bus.NewPublisher(c.js, "e31/cli", nil)
	for start := 0; start < len(job.Sweep); start += 512 {
		end := min(start+512, len(job.Sweep))
		batch := make([]bus.Pending, 0, end-start)
		for i := start; i < end; i++ {
			ids[i] = fmt.Sprintf("%s-%d", sweep, i)
			point := spec
			point.Sweep = &events.SweepPoint{ID: sweep, Index: i, Count: len(job.Sweep), Value: job.Sweep[i]}
			batch = append(batch, bus.Pending{Subject: ids[i], Event: &events.JobRequested{Submitter: c.who.Name, Spec: point}, ExpectSet: true})
		}
		subjects := make([]string, len(batch))
		for i, p := range batch {
			subjects[i] = events.RequestSubject(p.Subject, c.who.Name)
		}
		gctx, done := c.guard(ctx, subjects...)
		_, errs := pub.AppendBatch(gctx, batch)
		err := errors.Join(errs...)
		if err != nil {
			err = c.refused(gctx, fmt.Sprintf("submit sweep %s (%d of %d jobs submitted)", sweep, start, len(ids)), err)
		}
		done()
		if err != nil {
			return err
		}
	}
	if !wait {
		if asJSON {
			return json.NewEncoder(c.a.out).Encode(map[string]any{"id": sweep, "jobs": ids})
		}
		fmt.Fprintln(c.a.out, sweep)
		return nil
	}
	fmt.Fprintf(c.a.errOut, "submitted sweep %s: %d jobs\n", sweep, len(ids))
	return c.waitSweep(ctx, sweep, timeout, asJSON)
}

// stage uploads the job's local data and returns the spec to submit.
func (c *client) stage(ctx context.Context, job *jobfile.Job, p stage.Progress) (events.JobSpec, error) {
	spec := job.Spec
	spec.Data = append([]events.DataRef(nil), job.Spec.Data...)
	if len(job.Paths) > 0 {
		store, err := c.store(ctx, c.who.Name)
		if err != nil {
			return spec, err
		}
		for i, path := range job.Paths {
			ref, err := stage.Upload(ctx, store, path, p)
			if errors.Is(err, stage.ErrFull) {
				return spec, c.dataFull(ctx, fmt.Sprintf("stage data %q from %s", spec.Data[i].Name, path))
			}
			if err != nil {
				return spec, troubleErr(fmt.Errorf("stage data %q from %s: %w", spec.Data[i].Name, path, err))
			}
			ref.Name = spec.Data[i].Name
			spec.Data[i] = ref
		}
	}
	return spec, nil
}
