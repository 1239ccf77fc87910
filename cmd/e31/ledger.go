package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query/wire"
)

type ledgerOptions struct {
	asJSON, asCSV, totals, head bool
	q                           wire.ListRequest
	since, until                string
}

func ledgerCmd(a *app) *cobra.Command {
	var o ledgerOptions
	cmd := &cobra.Command{
		Use:   "ledger [ID]",
		Short: "Show hold records, what each submitter would be billed, or the log's chain head",
		Long:  help("ledger"),
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if o.asJSON && o.asCSV {
				return usageErr("--json and --csv: choose one")
			}
			if o.head && (o.totals || len(args) == 1) {
				return usageErr("--head shows the whole log's chain head: it takes no ID and no --totals")
			}
			if o.totals && len(args) == 1 {
				return usageErr("--totals is per submitter: it takes no job ID (use --submitter)")
			}
			for flag, t := range map[string]struct {
				s string
				v *time.Time
			}{"--since": {o.since, &o.q.Since}, "--until": {o.until, &o.q.Until}} {
				if t.s == "" {
					continue
				}
				v, err := parseWhen(t.s)
				if err != nil {
					return usageErr("%s %q: expected an RFC 3339 time such as 2026-12-01T00:00:00Z, or a date such as 2026-12-01", flag, t.s)
				}
				*t.v = v
			}
			return a.with(ctx, func(c *client.Client) error {
				switch {
				case o.head:
					return a.printHead(ctx, c, o)
				case o.totals:
					return a.printTotals(ctx, c, o)
				case len(args) == 1:
					return a.printOneRecord(ctx, c, args[0], o)
				}
				recs, behind, err := c.Records(ctx, o.q, true)
				if err != nil {
					return err
				}
				a.noteBehind(behind, "these records may not show everything yet")
				switch {
				case o.asJSON:
					return writeJSON(a.out, recs)
				case o.asCSV:
					return writeRecordsCSV(a.out, recs)
				}
				fmt.Fprintf(a.out, "%-36s  %-10s  %-15s  %-8s  %10s  %12s  %s\n", "JOB", "STATE", "OUTCOME", "NODE", "HELD_S", "CPU_CORE_S", "NAME")
				for _, r := range recs {
					fmt.Fprintf(a.out, "%-36s  %-10s  %-15s  %-8s  %10.3f  %12.3f  %s\n", r.Job, r.State, r.Outcome, r.Node, r.HeldSeconds, r.CPUCoreSeconds, r.Name)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.asJSON, "json", false, "print JSON")
	f.BoolVar(&o.asCSV, "csv", false, "print CSV: one line per record, or per submitter with --totals")
	f.BoolVar(&o.totals, "totals", false, "what each submitter would be billed for the period --since to --until")
	f.BoolVar(&o.head, "head", false, "print the hash chain head over the log (SEQ:HASH), for 'e31 audit --since-head' (the auditor's and the operator's)")
	f.StringVar(&o.q.Submitter, "submitter", "", "only this submitter's jobs")
	f.StringVar(&o.q.Node, "node", "", "only jobs held on this node")
	f.StringVar(&o.q.Sweep, "sweep", "", "only the jobs of this sweep")
	f.StringVar(&o.since, "since", "", "only jobs submitted at or after this time (RFC 3339 or a date); with --totals, the period's start")
	f.StringVar(&o.until, "until", "", "only jobs submitted before this time (RFC 3339 or a date); with --totals, the period's end")
	return cmd
}

// parseWhen reads an RFC 3339 time, or a date meaning its midnight UTC.
func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Parse(time.DateOnly, s)
}

// noteBehind tells the user, on stderr, that the ledger is still catching up.
func (a *app) noteBehind(b client.Behind, what string) {
	switch {
	case b.Applied < b.Last:
		fmt.Fprintf(a.errOut, "note: the ledger is catching up: it has read the log up to #%d of #%d (%d behind); %s\n",
			b.Applied, b.Last, b.Last-b.Applied, what)
	case b.CatchingUp:
		fmt.Fprintf(a.errOut, "note: the ledger is catching up; %s\n", what)
	}
}

// printOneRecord prints a job's record, as far as the ledger has read.
func (a *app) printOneRecord(ctx context.Context, c *client.Client, id string, o ledgerOptions) error {
	rec, behind, err := c.RecordSoFar(ctx, id)
	if err != nil {
		return err
	}
	a.noteBehind(behind, "this record may not show everything yet")
	switch {
	case o.asJSON:
		return writeJSON(a.out, rec)
	case o.asCSV:
		return writeRecordsCSV(a.out, []*hold.HoldRecord{rec})
	}
	printRecord(a.out, rec)
	return nil
}

// printHead prints the ledger's chain head.
func (a *app) printHead(ctx context.Context, c *client.Client, o ledgerOptions) error {
	info, err := c.Head(ctx)
	if err != nil {
		return err
	}
	a.noteBehind(client.Behind{Applied: info.Applied, Last: info.LastSeq}, fmt.Sprintf("this head is as of #%d", info.Head.Seq))
	if o.asJSON {
		return writeJSON(a.out, info)
	}
	if info.Head.Seq == 0 {
		return &exitError{exitFailed, errors.New("the ledger has read no message yet: there is no head")}
	}
	fmt.Fprintln(a.out, info.Head)
	return nil
}

// printTotals prints what each submitter would be billed for the period
// (a submitter is told its own bill only).
func (a *app) printTotals(ctx context.Context, c *client.Client, o ledgerOptions) error {
	totals, behind, err := c.Totals(ctx, wire.TotalsRequest{Since: o.q.Since, Until: o.q.Until, Submitter: o.q.Submitter})
	if err != nil {
		return err
	}
	a.noteBehind(behind, "these totals may not count everything yet")
	switch {
	case o.asJSON:
		return writeJSON(a.out, totals)
	case o.asCSV:
		return writeTotalsCSV(a.out, totals)
	}
	fmt.Fprintf(a.out, "%-20s  %6s  %8s  %12s  %14s  %16s  %12s  %5s\n", "SUBMITTER", "JOBS", "ATTEMPTS", "HELD_S", "CPU_CORE_S", "MEMORY_GIB_S", "GPU_S", "OPEN")
	for _, t := range totals {
		fmt.Fprintf(a.out, "%-20s  %6d  %8d  %12.3f  %14.3f  %16.3f  %12.3f  %5d\n",
			t.Submitter, t.Jobs, t.Attempts, t.HeldSeconds, t.CPUCoreSeconds, t.MemoryGiBSeconds, t.GPUSeconds, t.Open)
	}
	return nil
}

// recordColumns are the CSV columns of a record: one line per job, the
// meter's totals, the measured usage beside it, and the digest that ties
// the line to the events it was built from.
var recordColumns = []string{"job", "name", "submitter", "state", "outcome", "exit_code", "node", "attempts",
	"cpu", "memory_bytes", "gpu", "disk_bytes", "limit_seconds",
	"submitted_at", "held_at", "released_at",
	"held_seconds", "cpu_core_seconds", "memory_gib_seconds", "gpu_seconds",
	"usage_cpu_seconds", "usage_max_rss_bytes", "output_files", "output_bytes", "events_digest"}

func writeRecordsCSV(w io.Writer, recs []*hold.HoldRecord) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(recordColumns); err != nil {
		return err
	}
	for _, r := range recs {
		exit := ""
		if r.ExitCode != nil {
			exit = strconv.Itoa(*r.ExitCode)
		}
		row := []string{r.Job, r.Name, r.Submitter, r.State, string(r.Outcome), exit, r.Node, strconv.Itoa(len(r.Attempts)),
			num(r.Request.CPU), strconv.FormatInt(r.Request.MemoryBytes, 10), strconv.Itoa(r.Request.GPU),
			strconv.FormatInt(r.Request.DiskBytes, 10), num(r.Request.LimitSeconds),
			when(r.SubmittedAt), when(r.HeldAt), when(r.ReleasedAt),
			num(r.HeldSeconds), num(r.CPUCoreSeconds), num(r.MemoryGiBSeconds), num(r.GPUSeconds),
			num(r.Usage.CPUSeconds), strconv.FormatInt(r.Usage.MaxRSSBytes, 10),
			strconv.Itoa(r.Output.Files), strconv.FormatInt(r.Output.Bytes, 10), r.EventsDigest}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func writeTotalsCSV(w io.Writer, ts []wire.Totals) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"submitter", "jobs", "attempts", "held_seconds", "cpu_core_seconds", "memory_gib_seconds", "gpu_seconds", "open"}); err != nil {
		return err
	}
	for _, t := range ts {
		if err := cw.Write([]string{t.Submitter, strconv.Itoa(t.Jobs), strconv.Itoa(t.Attempts), num(t.HeldSeconds),
			num(t.CPUCoreSeconds), num(t.MemoryGiBSeconds), num(t.GPUSeconds), strconv.Itoa(t.Open)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// num writes a number exactly, as short as it goes.
func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func when(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
