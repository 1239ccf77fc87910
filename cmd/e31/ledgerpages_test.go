package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// TestALedgerListingPrintedByThePageIsTheListingPrintedAtOnce: `e31
// ledger` prints the records as the ledger's pages come, so that a history
// of a million jobs is not first gathered in memory; programs that read
// its JSON, CSV or table must get the same bytes as when it printed them
// all at once, whatever the pages, and with no record at all.
func TestALedgerListingPrintedByThePageIsTheListingPrintedAtOnce(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	code := 3
	var recs []*hold.HoldRecord
	for i, job := range []string{"a-1", "b-2", "c-3", "d-4", "e-5"} {
		recs = append(recs, &hold.HoldRecord{Job: job, Name: "a <name> & more", Submitter: "bob", State: "released",
			Outcome: events.Outcome("succeeded"), Node: "node-1", SubmittedAt: &at, ExitCode: &code,
			HeldSeconds: float64(i) + 0.25, Events: []hold.EventRef{{Seq: uint64(i + 1), Type: "JobRequested", Digest: "sha256:00"}}})
	}
	writers := map[string]struct {
		o   ledgerOptions
		all func(*bytes.Buffer, []*hold.HoldRecord) error
	}{
		"json":  {ledgerOptions{asJSON: true}, func(b *bytes.Buffer, r []*hold.HoldRecord) error { return writeJSON(b, r) }},
		"csv":   {ledgerOptions{asCSV: true}, func(b *bytes.Buffer, r []*hold.HoldRecord) error { return hold.WriteCSV(b, r) }},
		"table": {ledgerOptions{}, func(b *bytes.Buffer, r []*hold.HoldRecord) error { return hold.WriteTable(b, r) }},
	}
	for name, w := range writers {
		for _, pages := range [][][]*hold.HoldRecord{
			nil,
			{recs[:1]},
			{recs},
			{recs[:2], recs[2:3], recs[3:]},
		} {
			var all []*hold.HoldRecord
			for _, p := range pages {
				all = append(all, p...)
			}
			var want, got bytes.Buffer
			if all == nil {
				all = []*hold.HoldRecord{}
			}
			if err := w.all(&want, all); err != nil {
				t.Fatal(err)
			}
			rw := newRecordWriter(&got, w.o)
			for _, p := range pages {
				if err := rw.page(p); err != nil {
					t.Fatal(err)
				}
			}
			if err := rw.end(); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("%s in %d pages:\n%s\nwant, as printed at once:\n%s", name, len(pages), got.String(), want.String())
			}
		}
	}
}
