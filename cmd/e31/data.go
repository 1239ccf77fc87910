package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
)

// What a job keeps in the store (its staged data and its output) lives
// until its retention passes or its submitter deletes it. These commands
// show it and delete it; a deletion is a request in the job's log, and
// OUTPUT, which owns the store, records the deletion when it is done.

func dataCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Show and delete what jobs keep in the store: staged data and output",
		Long: `A job's staged data and its output are kept until its retention passes after
it ends (retention: in the job file, default 7d), or until they are deleted:

  e31 data ls              what your jobs keep, and until when
  e31 data rm ID           delete a job's staged data (--output: its output, --all: both)
  e31 output ID --delete   delete a job's output (after writing it, with -o)

A deletion is recorded in the job's log; its hold record stays for ever and
shows when. Bytes another job still holds stay in the store.`,
		Args: cobra.NoArgs,
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
			ctx := cmd.Context()
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			q := wire.StoredRequest{Deleted: deleted}
			if !all {
				q.Submitter = c.who.Name
			}
			jobs, err := c.stored(ctx, q)
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
			ctx := cmd.Context()
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			for _, id := range args {
				if err := c.deleteStored(ctx, id, what, reason, timeout); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&output, "output", false, "delete the jobs' output instead of their data")
	cmd.Flags().BoolVar(&all, "all", false, "delete both their data and their output")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the record")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the deletion to be recorded")
	return cmd
}

// stored asks OUTPUT what jobs keep, as of everything logged so far.
func (c *client) stored(ctx context.Context, q wire.StoredRequest) ([]wire.Stored, error) {
	seq, fresh, err := c.asOfNow(ctx)
	if err != nil {
		return nil, err
	}
	q.MinSeq, q.Fresh = seq, fresh
	var all []wire.Stored
	for {
		var reply wire.StoredReply
		if err := c.request(ctx, wire.OutputStoredSubject(c.who.User), q, &reply, 15*time.Second); err != nil {
			return nil, err
		}
		if reply.Error != "" {
			return nil, troubleErr(errors.New(reply.Error))
		}
		all = append(all, reply.Jobs...)
		if !reply.More || len(reply.Jobs) == 0 {
			return all, nil
		}
		q.After = reply.Jobs[len(reply.Jobs)-1].Job
	}
}

// deleteStored asks OUTPUT to delete what a job keeps and, if the job is
// over, waits until the deletion is in the log.
func (c *client) deleteStored(ctx context.Context, id, what, reason string, timeout time.Duration) error {
	if !events.ValidID(id) {
		return usageErr("%q is not a job id", id)
	}
	found, err := c.stored(ctx, wire.StoredRequest{Job: id, Deleted: true})
	if err != nil {
		return err
	}
	if len(found) == 0 {
		fmt.Fprintf(c.a.out, "job %s keeps nothing in the store\n", id)
		return nil
	}
	st := found[0]
	var todo []string
	for _, w := range []string{events.WhatData, events.WhatOutput} {
		part := st.Data
		if w == events.WhatOutput {
			part = st.Output
		}
		switch {
		case what != events.WhatAll && what != w:
		case part.DeletedAt != nil:
			fmt.Fprintf(c.a.out, "job %s: %s already deleted at %s\n", id, w, part.DeletedAt.UTC().Format(time.RFC3339))
		case part.Files == 0 && st.Over:
			fmt.Fprintf(c.a.out, "job %s has no %s stored\n", id, w)
		default:
			todo = append(todo, w)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	ask := what
	if len(todo) == 1 {
		ask = todo[0]
	}
	if _, err := c.append(ctx, id, &events.DeleteRequested{What: ask, By: c.who.Name, Reason: reason}); err != nil {
		return err
	}
	if !st.Over {
		fmt.Fprintf(c.a.out, "job %s: deletion of its %s requested; it is done when the job ends\n", id, strings.Join(todo, " and "))
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	left := map[string]bool{}
	for _, w := range todo {
		left[w] = true
	}
	err = c.followJob(wctx, id, false, func(m wire.StoredEvent) bool {
		env, err := events.Decode(m.Subject, natsHeader(m.Headers), storedBody(m))
		if err != nil {
			return true
		}
		if d, ok := env.Event.(*events.Deleted); ok && left[d.What] {
			delete(left, d.What)
			fmt.Fprintf(c.a.out, "job %s: %s deleted (%d file(s), %s)\n", id, d.What, d.Files, humanBytes(d.Bytes))
		}
		return len(left) > 0
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return troubleErr(fmt.Errorf("job %s: deletion requested, but not recorded within %s: is the output service running?", id, timeout))
	}
	return err
}

// fetchOutput writes a job's returned output into dir: the folder its
// manifest names, or, for output returned before manifests, the files its
// record lists.
func fetchOutput(ctx context.Context, s stage.Store, out hold.Output, dir string, p stage.Progress) error {
	if out.Manifest != "" {
		return stage.FetchDir(ctx, s, out.Manifest, dir, p)
	}
	return stage.Fetch(ctx, s, out.List, dir, p)
}
