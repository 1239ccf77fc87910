package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	gojson "github.com/goccy/go-json"
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
				v, err := client.ParseTime(t.s)
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
				// Page by page, as the ledger answers: a history of a
				// million jobs is printed as it comes, in a page's memory.
				w := newRecordWriter(a.out, o)
				behind, err := c.RecordPages(ctx, o.q, true, w.page)
				if err != nil {
					return err
				}
				if err := w.end(); err != nil {
					return err
				}
				a.noteBehind(behind, "these records may not show everything yet")
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

// noteBehind tells the user, on stderr, that the ledger is still catching up.
func (a *app) noteBehind(b client.Behind, what string) {
	if note := b.Note(what); note != "" {
		fmt.Fprintln(a.errOut, note)
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
		return hold.WriteCSV(a.out, []*hold.HoldRecord{rec})
	}
	return hold.WriteText(a.out, rec)
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
		return client.WriteTotalsCSV(a.out, totals)
	}
	return client.WriteTotalsTable(a.out, totals)
}

// recordWriter prints a listing of records a page at a time, in the form
// the options ask for: the same bytes as printing them all at once.
type recordWriter struct {
	w       io.Writer
	o       ledgerOptions
	started bool
}

func newRecordWriter(w io.Writer, o ledgerOptions) *recordWriter {
	return &recordWriter{w: w, o: o}
}

// page prints one page of records.
func (r *recordWriter) page(recs []*hold.HoldRecord) error {
	first := !r.started
	r.started = true
	switch {
	case r.o.asJSON:
		return writeJSONItems(r.w, recs, first)
	case r.o.asCSV:
		if first {
			return hold.WriteCSV(r.w, recs)
		}
		return hold.WriteCSVBody(r.w, recs)
	case first:
		return hold.WriteTable(r.w, recs)
	}
	return hold.WriteTableBody(r.w, recs)
}

// end finishes the listing: a JSON array is closed, and an empty listing
// is printed as one (an empty array, a header).
func (r *recordWriter) end() error {
	if !r.started {
		return r.page(nil)
	}
	if r.o.asJSON {
		_, err := io.WriteString(r.w, "\n]\n")
		return err
	}
	return nil
}

// writeJSONItems writes records as items of the JSON array writeJSON
// would write of all of them, opening it if first; recordWriter.end
// closes it. An empty first page is the whole array: "[]".
func writeJSONItems(w io.Writer, recs []*hold.HoldRecord, first bool) error {
	if first && len(recs) == 0 {
		return writeJSON(w, []*hold.HoldRecord{})
	}
	var b bytes.Buffer
	for i, rec := range recs {
		switch {
		case first && i == 0:
			b.WriteString("[\n  ")
		default:
			b.WriteString(",\n  ")
		}
		// goccy/go-json writes what encoding/json does (the page test
		// holds the two to the same bytes) in a fifth of the time: a
		// listing of a long history prints every record of it.
		item, err := gojson.MarshalIndent(rec, "  ", "  ")
		if err != nil {
			return err
		}
		b.Write(item)
	}
	_, err := w.Write(b.Bytes())
	return err
}
