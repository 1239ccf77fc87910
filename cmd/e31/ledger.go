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

	"github.com/e31net/e31/pkg/auth"
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
		Long: `Show one job's hold record, or every record (filtered by submitter, node,
sweep or submission time), as a table, JSON or CSV.

--totals prints, per submitter, what they would be billed for the period from
--since to --until: jobs, held seconds, cpu-core-seconds, memory-GiB-seconds and
gpu-seconds. Held time is cut at the period's edges, so the totals of
consecutive periods add up to the total of both; an attempt still held is
counted as open and billed once it is released.

--head prints the ledger's hash chain head over the whole log, as SEQ:HASH.
Keep it somewhere else: 'e31 audit --since-head SEQ:HASH' later proves that
nothing at or before SEQ was changed, inserted or removed.

While the ledger rebuilds after a start it answers with what it has read so
far and the command says how far behind it is.`,
		Args: cobra.MaximumNArgs(1),
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
			c, err := a.dial(ctx)
			if err != nil {
				return err
			}
			defer c.close()
			switch {
			case o.head:
				return c.printHead(ctx, o)
			case o.totals:
				return c.printTotals(ctx, o)
			case len(args) == 1:
				return c.printOneRecord(ctx, args[0], o)
			}
			recs, status, err := c.records(ctx, o.q, true)
			if err != nil {
				return err
			}
			c.noteBehind(status, "these records may not show everything yet")
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

// behind is how far the ledger had read when it answered: applied of
// last, for those told the log's sequences; for a submitter, only whether
// it was still catching up.
type behind struct {
	applied, last uint64
	catchingUp    bool
}

// noteBehind tells the user, on stderr, that the ledger is still catching up.
func (c *client) noteBehind(b behind, what string) {
	switch {
	case b.applied < b.last:
		fmt.Fprintf(c.a.errOut, "note: the ledger is catching up: it has read the log up to #%d of #%d (%d behind); %s\n",
			b.applied, b.last, b.last-b.applied, what)
	case b.catchingUp:
		fmt.Fprintf(c.a.errOut, "note: the ledger is catching up; %s\n", what)
	}
}

// allRecords pages through the ledger as of now; it fails if the ledger
// has not read the log that far.
func (c *client) allRecords(ctx context.Context, q wire.ListRequest) ([]*hold.HoldRecord, error) {
	recs, _, err := c.records(ctx, q, false)
	return recs, err
}

// records pages through the ledger as of now. With partial, a ledger that
// is still catching up answers with what it has, and the caller says so.
func (c *client) records(ctx context.Context, q wire.ListRequest, partial bool) ([]*hold.HoldRecord, behind, error) {
	seq, fresh, err := c.asOfNow(ctx)
	if err != nil {
		return nil, behind{}, err
	}
	q.MinSeq, q.Fresh = seq, fresh
	st := behind{applied: seq, last: seq}
	all := []*hold.HoldRecord{}
	for {
		var reply wire.ListReply
		if err := c.request(ctx, c.ledger(wire.EndpointList), q, &reply, 30*time.Second); err != nil {
			return nil, st, err
		}
		if reply.Error != "" {
			return nil, st, &exitError{exitUsage, errors.New(reply.Error)}
		}
		if reply.Applied < seq || reply.CatchingUp {
			if !partial {
				if reply.Applied < seq {
					return nil, st, troubleErr(fmt.Errorf("the ledger is catching up: it has read the log up to #%d of #%d; try again", reply.Applied, seq))
				}
				return nil, st, troubleErr(errors.New("the ledger is catching up; try again"))
			}
			st.applied, st.catchingUp = min(st.applied, reply.Applied), true
			// Take what it has, without waiting again per page.
			q.MinSeq, q.Fresh = 0, false
		}
		all = append(all, reply.Records...)
		if !reply.More || len(reply.Records) == 0 {
			return all, st, nil
		}
		q.After = reply.Records[len(reply.Records)-1].Job
	}
}

// printOneRecord prints a job's record, as far as the ledger has read.
func (c *client) printOneRecord(ctx context.Context, id string, o ledgerOptions) error {
	rec, err := c.currentRecord(ctx, id)
	if err != nil {
		// Still catching up: show what the ledger has, and say so.
		var reply wire.RecordReply
		if rerr := c.request(ctx, c.ledger(wire.EndpointRecord), wire.RecordRequest{Job: id}, &reply, 15*time.Second); rerr != nil || reply.Record == nil {
			return err
		}
		b := behind{catchingUp: true}
		if auth.SeesAll(c.who.User) {
			seq, lerr := c.lastSeq(ctx)
			if lerr != nil || reply.Applied >= seq {
				return err
			}
			b = behind{applied: reply.Applied, last: seq}
		}
		c.noteBehind(b, "this record may not show everything yet")
		rec = reply.Record
	}
	switch {
	case o.asJSON:
		return writeJSON(c.a.out, rec)
	case o.asCSV:
		return writeRecordsCSV(c.a.out, []*hold.HoldRecord{rec})
	}
	printRecord(c.a.out, rec)
	return nil
}

// printHead prints the ledger's chain head.
func (c *client) printHead(ctx context.Context, o ledgerOptions) error {
	info, err := c.head(ctx)
	if err != nil {
		return err
	}
	c.noteBehind(behind{applied: info.Applied, last: info.LastSeq}, fmt.Sprintf("this head is as of #%d", info.Head.Seq))
	if o.asJSON {
		return writeJSON(c.a.out, info)
	}
	if info.Head.Seq == 0 {
		return &exitError{exitFailed, errors.New("the ledger has read no message yet: there is no head")}
	}
	fmt.Fprintln(c.a.out, info.Head)
	return nil
}

// printTotals prints what each submitter would be billed for the period
// (a submitter is told its own bill only).
func (c *client) printTotals(ctx context.Context, o ledgerOptions) error {
	seq, fresh, err := c.asOfNow(ctx)
	if err != nil {
		return err
	}
	q := wire.TotalsRequest{Since: o.q.Since, Until: o.q.Until, Submitter: o.q.Submitter, MinSeq: seq, Fresh: fresh}
	var reply wire.TotalsReply
	if err := c.request(ctx, c.ledger(wire.EndpointTotals), q, &reply, 30*time.Second); err != nil {
		return err
	}
	if reply.Error != "" {
		return &exitError{exitUsage, errors.New(reply.Error)}
	}
	c.noteBehind(behind{applied: reply.Applied, last: seq, catchingUp: reply.CatchingUp}, "these totals may not count everything yet")
	switch {
	case o.asJSON:
		return writeJSON(c.a.out, reply.Submitters)
	case o.asCSV:
		return writeTotalsCSV(c.a.out, reply.Submitters)
	}
	fmt.Fprintf(c.a.out, "%-20s  %6s  %8s  %12s  %14s  %16s  %12s  %5s\n", "SUBMITTER", "JOBS", "ATTEMPTS", "HELD_S", "CPU_CORE_S", "MEMORY_GIB_S", "GPU_S", "OPEN")
	for _, t := range reply.Submitters {
		fmt.Fprintf(c.a.out, "%-20s  %6d  %8d  %12.3f  %14.3f  %16.3f  %12.3f  %5d\n",
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
