package main

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query/wire"
)

// What a job keeps in the store (its staged data and its output) lives
// until its retention passes or its submitter deletes it. These commands
// show it and delete it; a deletion is a request in the job's log, and
// OUTPUT, which owns the store, records the deletion when it is done.

func dataCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Show and delete what jobs keep in the store: staged data and output",
		Long:  help("data"),
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(dataLsCmd(a), dataRmCmd(a))
	return cmd
}

func dataLsCmd(a *app) *cobra.Command {
	var all, deleted, asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the jobs whose data or output is still stored, and when it expires",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.with(cmd.Context(), func(c *client.Client) error {
				q := wire.StoredRequest{Deleted: deleted}
				if !all {
					q.Submitter = c.Who().Name
				}
				jobs, err := c.Stored(cmd.Context(), q)
				if err != nil {
					return err
				}
				return a.show(asJSON, jobs, func(w io.Writer) error { return client.WriteStoredTable(w, jobs) })
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every submitter's jobs, not only yours")
	cmd.Flags().BoolVar(&deleted, "deleted", false, "include jobs whose data and output are deleted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func dataRmCmd(a *app) *cobra.Command {
	var output, all bool
	var reason string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "rm ID...",
		Short: "Delete jobs' staged data (--output: their output; --all: both)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			what := events.WhatData
			switch {
			case output && all:
				return usageErr("give --output or --all, not both")
			case output:
				what = events.WhatOutput
			case all:
				what = events.WhatAll
			}
			return a.with(cmd.Context(), func(c *client.Client) error {
				for _, id := range args {
					if err := deleteStored(cmd.Context(), a, c, id, what, reason, timeout); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&output, "output", false, "delete the jobs' output instead of their data")
	cmd.Flags().BoolVar(&all, "all", false, "delete both their data and their output")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the record")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the deletion to be recorded")
	return cmd
}

// deleteStored deletes what a job keeps and says what it did.
func deleteStored(ctx context.Context, a *app, c *client.Client, id, what, reason string, timeout time.Duration) error {
	d, err := c.Delete(ctx, id, what, reason, timeout)
	if werr := d.WriteText(a.out); err == nil {
		err = werr
	}
	return err
}
