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
	var wait, asJSON, quiet bool
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
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
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
	return cmd
}

// submit stages the job's local data and publishes its request. The id is
// new (time ordered), and the request is stored only if no event exists
// for it yet, so it can never land on another job.
func (c *client) submit(ctx context.Context, job *jobfile.Job, p stage.Progress) (string, error) {
	spec := job.Spec
	spec.Data = append([]events.DataRef(nil), job.Spec.Data...)
	if len(job.Paths) > 0 {
		store, err := c.store(ctx)
		if err != nil {
			return "", err
		}
		for i, path := range job.Paths {
			ref, err := stage.Upload(ctx, store, path, p)
			if err != nil {
				return "", troubleErr(fmt.Errorf("stage data %q from %s: %w", spec.Data[i].Name, path, err))
			}
			ref.Name = spec.Data[i].Name
			spec.Data[i] = ref
		}
	}
	u, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	id := u.String()
	pub := bus.NewPublisher(c.js, "e31/cli", nil)
	req := events.JobRequested{Submitter: c.a.env.User, Spec: spec}
	if _, err := pub.Append(ctx, id, req, bus.ExpectLast(0)); err != nil {
		if errors.Is(err, bus.ErrConflict) {
			return "", troubleErr(fmt.Errorf("job id %s is already in use; submit again", id))
		}
		return "", troubleErr(fmt.Errorf("submit: %w", err))
	}
	return id, nil
}
