package client_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

func member(job string, index, again int, outcome events.Outcome) *hold.HoldRecord {
	return &hold.HoldRecord{Job: job, State: hold.StateReleased, Outcome: outcome, HeldSeconds: 1,
		Sweep: &events.SweepPoint{ID: "s", Index: index, Count: 3, Again: again}}
}

// Each point counts once, as the member of its highest round, in index
// order; the members it replaced count in the held seconds alone.
func TestASweepCountsEachPointAsItsLatestMember(t *testing.T) {
	recs := []*hold.HoldRecord{
		member("s-2-a1", 2, 1, events.Succeeded),
		member("s-0", 0, 0, events.Succeeded),
		member("s-1", 1, 0, events.Failed),
		member("s-2", 2, 0, events.Failed),
		member("s-1-a2", 1, 2, events.Succeeded),
		member("s-1-a1", 1, 1, events.Failed),
	}
	var got []string
	for _, r := range client.Points(recs) {
		got = append(got, r.Job)
	}
	if strings.Join(got, " ") != "s-0 s-1-a2 s-2-a1" {
		t.Fatalf("points %v, want each index's latest member, in index order", got)
	}
	s := client.Summarize("s", recs)
	if s.Jobs != 3 || s.Outcomes["succeeded"] != 3 || s.Replaced != 3 || s.HeldSeconds != 6 || !s.Succeeded() {
		t.Errorf("summary %+v: want 3 points succeeded, 3 replaced, every member's held seconds", s)
	}
	var b bytes.Buffer
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "submitted again: 3 (each point counts as its latest)") {
		t.Errorf("summary text:\n%s", b.String())
	}
}

// What e31 output SWEEP prints: what moved, and the points without output
// by why, the first of them one by one.
func TestSweepOutputText(t *testing.T) {
	o := client.SweepOutput{Sweep: "s", Dir: "out", Points: 25, Written: 2, FilesFetched: 1, BytesFetched: 2048, FilesKept: 1}
	for i := range 23 {
		o.Without = append(o.Without, client.PointWithout{Index: i + 2, Job: "s-x", State: hold.StateReleased, Outcome: events.Failed, Reason: "exited with code 1"})
	}
	o.Without[0].Outcome, o.Without[0].State, o.Without[0].Reason = "", hold.StateRunning, ""
	var b bytes.Buffer
	if err := o.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"sweep s: 2 of 25 point(s) written under out/<index>/ (1 file(s), 2 KiB fetched; 1 file(s) already in place)",
		"23 point(s) without output: 22 failed, 1 running",
		"  [2] running (s-x)",
		"  [3] failed: exited with code 1 (s-x)",
	}
	for i, w := range want {
		if i >= len(lines) || lines[i] != w {
			t.Fatalf("line %d of\n%s\nwant %q", i, b.String(), w)
		}
	}
	if last := lines[len(lines)-1]; last != "  … and 3 more (e31 output --json, or e31 status s)" || len(lines) != 23 {
		t.Errorf("%d lines, the last %q: want 20 points listed and the rest counted", len(lines), last)
	}
}

// A sweep's summary lists the first 20 jobs that did not succeed, not ten
// thousand.
func TestSweepTextListsTheFirstFailures(t *testing.T) {
	var recs []*hold.HoldRecord
	for i := range 25 {
		recs = append(recs, member("s-x", i, 0, events.Cancelled))
	}
	var b bytes.Buffer
	if err := client.Summarize("s", recs).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), ": cancelled: "); n != 20 || !strings.HasSuffix(b.String(), "… and more that did not succeed (e31 status s --json; e31 logs s --failed)\n") {
		t.Errorf("%d listed:\n%s", n, b.String())
	}
}
