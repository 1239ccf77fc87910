package main

import (
	"context"
	"fmt"
	"strings"
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
				if asJSON {
					return writeJSON(a.out, jobs)
				}
				fmt.Fprintf(a.out, "%-36s  %-10s  %-10s  %-20s  %s\n", "JOB", "DATA", "OUTPUT", "EXPIRES", "NAME")
				for _, j := range jobs {
					expires := "(running)"
					if j.Expires != nil {
						expires = j.Expires.UTC().Format("2006-01-02T15:04:05Z")
					}
					fmt.Fprintf(a.out, "%-36s  %-10s  %-10s  %-20s  %s\n", j.Job, partText(j.Data), partText(j.Output), expires, j.Name)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every submitter's jobs, not only yours")
	cmd.Flags().BoolVar(&deleted, "deleted", false, "include jobs whose data and output are deleted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func partText(p wire.StoredPart) string {
	switch {
	case p.DeletedAt != nil:
		return "deleted"
	case p.Files == 0:
		return "-"
	}
	return humanBytes(p.Bytes)
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
	if d.Nothing {
		fmt.Fprintf(a.out, "job %s keeps nothing in the store\n", id)
	}
	var asked []string
	for _, p := range d.Parts {
		switch {
		case p.DeletedAt != nil:
			fmt.Fprintf(a.out, "job %s: %s already deleted at %s\n", id, p.What, p.DeletedAt.UTC().Format(time.RFC3339))
		case p.None:
			fmt.Fprintf(a.out, "job %s has no %s stored\n", id, p.What)
		default:
			asked = append(asked, p.What)
		}
	}
	if d.Later {
		fmt.Fprintf(a.out, "job %s: deletion of its %s requested; it is done when the job ends\n", id, strings.Join(asked, " and "))
	}
	for _, del := range d.Deleted {
		fmt.Fprintf(a.out, "job %s: %s deleted (%d file(s), %s)\n", id, del.What, del.Files, humanBytes(del.Bytes))
	}
	return err
}
