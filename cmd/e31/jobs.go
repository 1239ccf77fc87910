package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
)

func waitCmd(a *app) *cobra.Command {
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait until a job's compute is released; print its hold record",
		Long:  help("wait"),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.with(cmd.Context(), func(c *client.Client) error {
				return a.waitAndPrint(cmd.Context(), c, args[0], timeout, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the hold record as JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: no limit)")
	return cmd
}

// waitAndPrint waits until a job (or a sweep) is over and prints its
// record; the exit status is 0 only if it succeeded.
func (a *app) waitAndPrint(ctx context.Context, c *client.Client, id string, timeout time.Duration, asJSON bool) error {
	rec, err := c.Wait(ctx, id, timeout)
	if errors.Is(err, client.ErrNoSuchJob) {
		// Not a job: perhaps a sweep.
		if recs, serr := c.SweepRecords(ctx, id); serr == nil && len(recs) > 0 {
			return a.waitSweep(ctx, c, id, timeout, asJSON)
		}
	}
	if err != nil {
		return err
	}
	err = a.show(asJSON, rec, func(w io.Writer) error {
		if err := hold.WriteText(w, rec); err != nil || rec.Outcome == events.Succeeded {
			return err
		}
		// What a user asks first about a job that failed: its last 10
		// lines of stderr.
		return hold.WriteStderrTail(w, rec.Job, c.StderrTail(ctx, rec, 10))
	})
	if err == nil && rec.Outcome != events.Succeeded {
		return silent(exitFailed)
	}
	return err
}

// waitSweep waits until every job of a sweep is over, then prints the
// sweep's summary; the exit status is 0 only if every job succeeded.
func (a *app) waitSweep(ctx context.Context, c *client.Client, sweep string, timeout time.Duration, asJSON bool) error {
	recs, err := c.WaitSweep(ctx, sweep, timeout)
	if err != nil {
		return err
	}
	s := client.Summarize(sweep, recs)
	if err := a.show(asJSON, s, s.WriteText); err != nil || s.Succeeded() {
		return err
	}
	return silent(exitFailed)
}

func statusCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status ID",
		Short: "Show where a job is and, while it waits, why",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.with(ctx, func(c *client.Client) error {
				st, err := c.Status(ctx, args[0])
				if err != nil {
					// Not a job: perhaps a sweep.
					if recs, serr := c.SweepRecords(ctx, args[0]); serr == nil && len(recs) > 0 {
						s := client.Summarize(args[0], recs)
						return a.show(asJSON, s, s.WriteText)
					}
					return err
				}
				return a.show(asJSON, st, func(w io.Writer) error { _, err := fmt.Fprintln(w, st); return err })
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func outputCmd(a *app) *cobra.Command {
	var dir string
	var quiet, del, asJSON bool
	cmd := &cobra.Command{
		Use:   "output ID",
		Short: "Write a job's returned output files into a directory (a sweep's: each job's under DIR/<index>/)",
		Long:  help("output"),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return a.with(ctx, func(c *client.Client) error {
				rec, err := c.Record(ctx, args[0])
				if sweepOf(ctx, c, args[0], err) {
					if del {
						return usageErr("--delete takes a job's id, not a sweep's")
					}
					return a.outputSweep(ctx, c, args[0], dir, quiet, asJSON)
				}
				if err != nil {
					return err
				}
				if err := client.HasOutput(rec); err != nil {
					return err
				}
				if del && dir == "" {
					return deleteStored(ctx, a, c, rec.Job, events.WhatOutput, "", 30*time.Second)
				}
				if dir == "" {
					dir = rec.Job
				}
				if err := c.Output(ctx, rec, dir, progressFor(a.errOut, quiet)); err != nil {
					return err
				}
				err = a.show(asJSON, map[string]any{"job": rec.Job, "dir": dir, "output": rec.Output}, func(w io.Writer) error {
					return client.WriteOutputText(w, rec, dir)
				})
				if err != nil {
					return err
				}
				if del {
					return deleteStored(ctx, a, c, rec.Job, events.WhatOutput, "", 30*time.Second)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&dir, "output", "o", "", "directory to write into")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	cmd.Flags().BoolVar(&del, "delete", false, "delete the output from the store (after writing it, with -o)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was written as JSON")
	return cmd
}

func cancelCmd(a *app) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Stop a job, or every job of a sweep: compute is released and output so far returned",
		Long:  help("cancel"),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.with(cmd.Context(), func(c *client.Client) error {
				rec, err := c.Cancel(cmd.Context(), args[0], reason)
				if sweepOf(cmd.Context(), c, args[0], err) {
					return a.cancelSweep(cmd.Context(), c, args[0], reason)
				}
				if err != nil {
					return err
				}
				if rec.Over() {
					fmt.Fprintf(a.out, "job %s is already over (%s)\n", rec.Job, rec.Outcome)
					return nil
				}
				fmt.Fprintf(a.out, "cancel of %s requested (it was %s)\n", rec.Job, rec.State)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the record")
	return cmd
}

func eventsCmd(a *app) *cobra.Command {
	var follow, asJSON bool
	cmd := &cobra.Command{
		Use:   "events [ID]",
		Short: "Print the raw events of one job, or the whole log",
		Long:  help("events"),
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			enc := json.NewEncoder(a.out)
			show := func(m wire.StoredEvent) error {
				if asJSON {
					return enc.Encode(m)
				}
				_, err := fmt.Fprintln(a.out, client.EventLine(m))
				return err
			}
			return a.with(ctx, func(c *client.Client) error {
				if len(args) == 1 {
					return ignoreCancel(c.Events(ctx, args[0], follow, show))
				}
				if err := c.NeedLog("e31 events without a job id"); err != nil {
					return err
				}
				// The whole stream, whatever its subjects: the export is
				// what the ledger's hash chain runs over.
				return ignoreCancel(c.Scan(ctx, nil, follow, show))
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events as they are logged")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line: sequence, subject, headers and body as stored")
	return cmd
}

func ignoreCancel(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// show prints v as JSON with --json, else as text writes it.
func (a *app) show(asJSON bool, v any, text func(io.Writer) error) error {
	if asJSON {
		return writeJSON(a.out, v)
	}
	return text(a.out)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
