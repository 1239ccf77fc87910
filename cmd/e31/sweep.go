package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/e31net/e31/pkg/client"
)

// A sweep's id works wherever a job's does (see pkg/client's sweep.go):
// each command asks for a job first, and takes an id that names none for
// a sweep's if the sweep has members.

// sweepOf reports whether id, which names no job of the asker's, is a
// sweep's.
func sweepOf(ctx context.Context, c *client.Client, id string, err error) bool {
	if !errors.Is(err, client.ErrNoSuchJob) {
		return false
	}
	recs, serr := c.SweepRecords(ctx, id)
	return serr == nil && len(recs) > 0
}

// outputSweep writes every point's output under dir/<index>/: one bar of
// bytes on a terminal, else a line every tenth of the points.
func (a *app) outputSweep(ctx context.Context, c *client.Client, sweep, dir string, quiet, asJSON bool) error {
	if dir == "" {
		dir = sweep
	}
	opts := client.SweepOutputOptions{Progress: progressFor(a.errOut, quiet || asJSON)}
	if opts.Progress == nil && !quiet && !asJSON {
		opts.Point = pointLines(a.errOut, "output "+sweep, "point(s) written")
	}
	res, err := c.OutputSweep(ctx, sweep, dir, opts)
	if errors.Is(err, client.ErrNoSuchJob) || (err != nil && !errors.Is(err, client.ErrNoOutput)) {
		return err
	}
	if serr := a.show(asJSON, res, res.WriteText); serr != nil {
		return serr
	}
	if err != nil || len(res.Without) > 0 {
		// Every point that could be written was: the summary says which
		// were not, and why.
		return silent(exitFailed)
	}
	return nil
}

// pointLines is progress for a log rather than a terminal: a line each
// time another tenth of the points is done, and at the last.
func pointLines(w io.Writer, label, what string) func(done, total int) {
	next := 0
	return func(done, total int) {
		if done < next && done < total {
			return
		}
		fmt.Fprintf(w, "%s: %d of %d %s\n", label, done, total, what)
		next = done + max(total/10, 1)
	}
}

// cancelSweep asks, in one event, for every member of a sweep not yet over
// to be stopped.
func (a *app) cancelSweep(ctx context.Context, c *client.Client, sweep, reason string) error {
	res, err := c.CancelSweep(ctx, sweep, reason)
	if err != nil {
		return err
	}
	if res.Live == 0 {
		fmt.Fprintf(a.out, "sweep %s is already over (%d jobs)\n", sweep, res.Points)
		return nil
	}
	fmt.Fprintf(a.out, "cancel of sweep %s requested: %d of its jobs were not over (e31 wait %s)\n", sweep, res.Live, sweep)
	return nil
}

// failedLogs writes the tail of each failed point's stderr, headed by its
// index and job id, to stdout.
func (a *app) failedLogs(ctx context.Context, c *client.Client, sweep string, lines int, asJSON bool) error {
	tails, err := c.FailedTails(ctx, sweep, lines)
	if errors.Is(err, client.ErrNoSuchJob) {
		return fmt.Errorf("--failed takes a sweep's id: %w", err)
	}
	if err != nil {
		return err
	}
	return a.show(asJSON, tails, func(w io.Writer) error { return client.WriteTails(w, tails) })
}

// submitAgain submits again the points of a sweep that did not succeed,
// into the same sweep; with wait, it waits for the sweep and summarizes.
func (a *app) submitAgain(ctx context.Context, c *client.Client, sweep, file string, quiet, wait bool, timeout time.Duration, asJSON bool) error {
	job, err := parseJobFile(file)
	if err != nil {
		return err
	}
	res, err := c.SubmitAgain(ctx, sweep, job, progressFor(a.errOut, quiet || asJSON))
	if err != nil {
		return err
	}
	switch {
	case !wait && asJSON:
		return writeJSON(a.out, res)
	case !wait:
		fmt.Fprintf(a.errOut, "sweep %s: %d job(s) submitted again (round %d); %d not over yet, left alone\n", sweep, len(res.Jobs), res.Round, res.Running)
		_, err = fmt.Fprintln(a.out, sweep)
		return err
	}
	fmt.Fprintf(a.errOut, "sweep %s: %d job(s) submitted again (round %d)\n", sweep, len(res.Jobs), res.Round)
	return a.waitSweep(ctx, c, sweep, timeout, asJSON)
}
