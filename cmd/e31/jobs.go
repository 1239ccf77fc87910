package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/api"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

func waitCmd(a *app) *cobra.Command {
	var asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait until a job's compute is released; print its hold record",
		Long: `Wait until the job is over (its compute released, or it was rejected or
cancelled) and print its hold record. The exit status is 0 only if the job
succeeded, 1 if it ended any other way, 3 if waiting timed out.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.close()
			return c.waitAndPrint(cmd.Context(), args[0], timeout, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the hold record as JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: no limit)")
	return cmd
}

func (c *client) waitAndPrint(ctx context.Context, id string, timeout time.Duration, asJSON bool) error {
	if _, err := c.currentRecord(ctx, id); err != nil && !c.inLog(ctx, id) {
		seq, _ := c.lastSeq(ctx)
		if recs, serr := c.sweepRecords(ctx, id, seq); serr == nil && len(recs) > 0 {
			ids := make([]string, len(recs))
			var from uint64
			for i, r := range recs {
				ids[i] = r.Job
				if len(r.Events) > 0 && (from == 0 || r.Events[0].Seq < from) {
					from = r.Events[0].Seq
				}
			}
			return c.waitSweep(ctx, id, ids, from, timeout, asJSON)
		}
		return err
	}
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	last, err := c.waitOver(wctx, id)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			rec, _ := c.currentRecord(ctx, id)
			state := "unknown"
			if rec != nil {
				state = rec.State
			}
			return troubleErr(fmt.Errorf("job %s is still %s after %s", id, state, timeout))
		}
		return err
	}
	rec, err := c.record(ctx, id, last.Seq)
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(c.a.out, rec); err != nil {
			return err
		}
	} else {
		printRecord(c.a.out, rec)
	}
	if rec.Outcome != events.Succeeded {
		return silent(exitFailed)
	}
	return nil
}

func statusCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status ID",
		Short: "Show where a job is and, while it waits, why",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			if !events.ValidID(args[0]) {
				return usageErr("%q is not a job id", args[0])
			}
			seq, err := c.lastSeq(ctx)
			if err != nil {
				return err
			}
			rec, err := c.record(ctx, args[0], seq)
			if err != nil {
				// Not a job: perhaps a sweep.
				if recs, serr := c.sweepRecords(ctx, args[0], seq); serr == nil && len(recs) > 0 {
					if asJSON {
						return writeJSON(a.out, sweepSummaryOf(args[0], recs))
					}
					printSweep(a.out, args[0], recs)
					return nil
				}
				return err
			}
			st := status{ID: rec.Job, Name: rec.Name, State: rec.State, Outcome: rec.Outcome, Reason: rec.Reason, Node: rec.Node}
			if rec.State == api.StateWaiting {
				if why, err := c.why(ctx, rec.Job, seq); err == nil {
					st.Reason, st.Position = why.Reason, why.Position
				} else {
					st.Reason = "the scheduler did not say: " + err.Error()
				}
			}
			if asJSON {
				return writeJSON(a.out, st)
			}
			line := fmt.Sprintf("%s  %s", st.ID, st.State)
			if st.Outcome != "" && rec.Over() {
				line += " (" + string(st.Outcome) + ")"
			}
			if st.Node != "" && !rec.Over() {
				line += " on " + st.Node
			}
			if st.Reason != "" {
				line += ": " + st.Reason
			}
			fmt.Fprintln(a.out, line)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// status is `e31 status --json`.
type status struct {
	ID       string         `json:"id"`
	Name     string         `json:"name,omitempty"`
	State    string         `json:"state"`
	Outcome  events.Outcome `json:"outcome,omitempty"`
	Reason   string         `json:"reason,omitempty"`
	Position int            `json:"position,omitempty"`
	Node     string         `json:"node,omitempty"`
}

func outputCmd(a *app) *cobra.Command {
	var dir string
	var quiet, del bool
	cmd := &cobra.Command{
		Use:   "output ID",
		Short: "Write a job's returned output files into a directory",
		Long: `Write the files the job returned into DIR (default: a folder named after the
job id), checking every file against its digest. Any mismatch is an error:
output is never written as complete when it is not.

With --delete, delete the job's output from the store instead; with -o DIR
and --delete, write it first and delete it once it is written and checked.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			rec, err := c.currentRecord(ctx, args[0])
			if err != nil {
				return err
			}
			switch rec.State {
			case api.StateReturned, api.StateReleased:
			case api.StateRejected, api.StateCancelled:
				return &exitError{exitFailed, fmt.Errorf("job %s was %s: it has no output", rec.Job, rec.State)}
			default:
				return &exitError{exitFailed, fmt.Errorf("job %s is %s: its output is returned when it stops (e31 wait %s)", rec.Job, rec.State, rec.Job)}
			}
			if del && dir == "" {
				return c.deleteStored(ctx, rec.Job, events.WhatOutput, "", 30*time.Second)
			}
			if at := rec.Output.DeletedAt; at != nil {
				return &exitError{exitFailed, fmt.Errorf("job %s: its output was deleted at %s", rec.Job, at.UTC().Format(time.RFC3339))}
			}
			if dir == "" {
				dir = rec.Job
			}
			store, err := c.store(ctx)
			if err != nil {
				return err
			}
			if err := fetchOutput(ctx, store, rec.Output, dir, progressFor(a.errOut, quiet)); err != nil {
				return &exitError{exitFailed, fmt.Errorf("output of %s: %w", rec.Job, err)}
			}
			note := ""
			if rec.Output.Partial {
				note = " (partial: the job did not finish)"
			}
			fmt.Fprintf(a.out, "%d file(s), %s, written to %s%s\n", rec.Output.Files, humanBytes(rec.Output.Bytes), dir, note)
			if len(rec.Output.Missing) > 0 {
				fmt.Fprintf(a.out, "missing: %s\n", strings.Join(rec.Output.Missing, ", "))
			}
			if del {
				return c.deleteStored(ctx, rec.Job, events.WhatOutput, "", 30*time.Second)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&dir, "output", "o", "", "directory to write into")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	cmd.Flags().BoolVar(&del, "delete", false, "delete the output from the store (after writing it, with -o)")
	return cmd
}

func cancelCmd(a *app) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Stop a job: its compute is released and its output so far returned",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			rec, err := c.currentRecord(ctx, args[0])
			if err != nil {
				return err
			}
			if rec.Over() {
				fmt.Fprintf(a.out, "job %s is already over (%s)\n", rec.Job, rec.Outcome)
				return nil
			}
			pub := bus.NewPublisher(c.js, "e31/cli", nil)
			if _, err := pub.Append(ctx, rec.Job, events.CancelRequested{By: a.env.User, Reason: reason}); err != nil {
				return troubleErr(fmt.Errorf("cancel %s: %w", rec.Job, err))
			}
			fmt.Fprintf(a.out, "cancel of %s requested (it was %s)\n", rec.Job, rec.State)
			return nil
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
		Long: `Print the events of one job, or of the whole log, in log order. With --json,
one object per line with the stream sequence, subject, headers and body exactly
as stored: an export that 'e31 audit --from FILE' can check with no server.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			// The whole stream, whatever its subjects: the export is what
			// the ledger's hash chain runs over.
			var filters []string
			if len(args) == 1 {
				if !events.ValidID(args[0]) {
					return usageErr("%q is not a job id", args[0])
				}
				filters = []string{events.JobSubject(args[0])}
			}
			enc := json.NewEncoder(a.out)
			err = c.scan(ctx, filters, follow, func(m rawEvent) error {
				if asJSON {
					return enc.Encode(m)
				}
				env, err := events.Decode(m.Subject, natsHeader(m.Headers), m.Body)
				if err != nil {
					_, werr := fmt.Fprintf(a.out, "#%-6d %s  (not a valid event: %v)\n", m.Seq, m.Subject, err)
					return werr
				}
				env.Seq = m.Seq
				return printEvent(a.out, env)
			})
			return ignoreCancel(err)
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

func printEvent(w io.Writer, env events.Envelope) error {
	_, err := fmt.Fprintf(w, "#%-6d %s  %-16s %s\n", env.Seq, env.Time.Format("2006-01-02T15:04:05.000Z07:00"), events.Name(env.Type), env.ID)
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
