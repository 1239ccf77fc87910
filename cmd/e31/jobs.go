package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

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

// waitAndPrint waits until a job (or a sweep) is over, asking the ledger
// in long polls: waiting needs no access to the log, only to one's own
// records.
func (c *client) waitAndPrint(ctx context.Context, id string, timeout time.Duration, asJSON bool) error {
	if !events.ValidID(id) {
		return usageErr("%q is not a job id", id)
	}
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	q := wire.RecordRequest{Job: id, Fresh: true, UntilOver: true, Wait: 30 * time.Second}
	var rec *hold.HoldRecord
	for {
		if dl, ok := wctx.Deadline(); ok {
			q.Wait = min(30*time.Second, max(time.Until(dl), time.Millisecond))
		}
		r, _, err := c.recordAs(wctx, q)
		if errors.Is(err, errNoSuchJob) && q.Fresh {
			// Not a job: perhaps a sweep.
			if recs, serr := c.sweepRecords(ctx, id); serr == nil && len(recs) > 0 {
				return c.waitSweep(ctx, id, timeout, asJSON)
			}
			return err
		}
		if err != nil && wctx.Err() == nil {
			return err
		}
		if r != nil {
			rec = r
		}
		if rec != nil && rec.Over() {
			break
		}
		if wctx.Err() != nil {
			state := "unknown"
			if rec != nil {
				state = rec.State
			}
			return troubleErr(fmt.Errorf("job %s is still %s after %s", id, state, timeout))
		}
		q.Fresh = false
	}
	if asJSON {
		if err := writeJSON(c.a.out, rec); err != nil {
			return err
		}
	} else {
		printRecord(c.a.out, rec)
		if rec.Outcome != events.Succeeded {
			// What a user asks first about a job that failed.
			printStderrTail(c.a.out, rec.Job, c.stderrTail(ctx, rec, stderrLines))
		}
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
			rec, seq, err := c.freshRecord(ctx, args[0])
			if err != nil {
				// Not a job: perhaps a sweep.
				if recs, serr := c.sweepRecords(ctx, args[0]); serr == nil && len(recs) > 0 {
					if asJSON {
						return writeJSON(a.out, sweepSummaryOf(args[0], recs))
					}
					printSweep(a.out, args[0], recs)
					return nil
				}
				return err
			}
			st := status{ID: rec.Job, Name: rec.Name, State: rec.State, Outcome: rec.Outcome, Reason: rec.Reason, Node: rec.Node}
			if rec.State == hold.StateWaiting {
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
			case hold.StateReturned, hold.StateReleased:
			case hold.StateRejected, hold.StateCancelled:
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
			store, err := c.store(ctx, rec.Submitter)
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
			if _, err := c.append(ctx, rec.Job, &events.CancelRequested{By: c.who.Name, Reason: reason}); err != nil {
				return err
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
as stored: an export that 'e31 audit --from FILE' can check with no server.

A submitter sees the events of its own jobs, which the ledger reads for it;
the whole log is for the auditor and the operator.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			enc := json.NewEncoder(a.out)
			show := func(m wire.StoredEvent) error {
				if asJSON {
					return enc.Encode(m)
				}
				env, err := events.Decode(m.Subject, natsHeader(m.Headers), storedBody(m))
				if err != nil {
					_, werr := fmt.Fprintf(a.out, "#%-6d %s  (not a valid event: %v)\n", m.Seq, m.Subject, err)
					return werr
				}
				env.Seq = m.Seq
				return printEvent(a.out, env)
			}
			if len(args) == 1 {
				if !events.ValidID(args[0]) {
					return usageErr("%q is not a job id", args[0])
				}
				return ignoreCancel(c.printJobEvents(ctx, args[0], follow, show))
			}
			if err := c.needLog("e31 events without a job id"); err != nil {
				return err
			}
			// The whole stream, whatever its subjects: the export is what
			// the ledger's hash chain runs over.
			return ignoreCancel(c.scan(ctx, nil, follow, show))
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events as they are logged")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line: sequence, subject, headers and body as stored")
	return cmd
}

// printJobEvents prints one job's events, asked of the ledger; with
// follow, until the job is over.
func (c *client) printJobEvents(ctx context.Context, job string, follow bool, show func(wire.StoredEvent) error) error {
	var perr error
	if follow {
		err := c.followJob(ctx, job, true, func(e wire.StoredEvent) bool {
			perr = show(e)
			return perr == nil
		})
		return errors.Join(err, perr)
	}
	var after uint64
	fresh := true
	for {
		reply, err := c.jobEvents(ctx, job, after, 0, fresh)
		if err != nil {
			return err
		}
		fresh = false
		for _, e := range reply.Events {
			if err := show(e); err != nil {
				return err
			}
			after = e.Seq
		}
		if !reply.More {
			return nil
		}
	}
}

// storedBody is the exact body of a stored event.
func storedBody(m wire.StoredEvent) []byte {
	if m.BodyBase64 != "" {
		if b, err := base64.StdEncoding.DecodeString(m.BodyBase64); err == nil {
			return b
		}
	}
	return m.Body
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
