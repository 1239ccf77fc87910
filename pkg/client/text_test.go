package client_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/query/wire"
)

// The forms below are what `e31` prints; scripts read them.

func TestStatusLine(t *testing.T) {
	for _, c := range []struct {
		st   client.Status
		want string
	}{
		{client.Status{ID: "j", State: "waiting", Reason: "no node has 4 cpu free"}, "j  waiting: no node has 4 cpu free"},
		{client.Status{ID: "j", State: "running", Node: "node-1"}, "j  running on node-1"},
		{client.Status{ID: "j", State: "released", Outcome: events.Failed, Node: "node-1", Over: true}, "j  released (failed)"},
	} {
		if got := c.st.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.st, got, c.want)
		}
	}
}

func TestBehindNote(t *testing.T) {
	if n := (client.Behind{Applied: 5, Last: 5}).Note("x"); n != "" {
		t.Errorf("caught up: %q, want no note", n)
	}
	if n := (client.Behind{Applied: 3, Last: 5}).Note("x"); n != "note: the ledger is catching up: it has read the log up to #3 of #5 (2 behind); x" {
		t.Errorf("behind: %q", n)
	}
	if n := (client.Behind{CatchingUp: true}).Note("x"); n != "note: the ledger is catching up; x" {
		t.Errorf("catching up: %q", n)
	}
}

func TestTotalsCSV(t *testing.T) {
	var b bytes.Buffer
	if err := client.WriteTotalsCSV(&b, []wire.Totals{{Submitter: "alice", Jobs: 2, Attempts: 3, HeldSeconds: 1.25, CPUCoreSeconds: 0.5, Open: 1}}); err != nil {
		t.Fatal(err)
	}
	want := "submitter,jobs,attempts,held_seconds,cpu_core_seconds,memory_gib_seconds,gpu_seconds,open,lost_seconds\nalice,2,3,1.25,0.5,0,0,1,0\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

func TestSweepText(t *testing.T) {
	recs := []*hold.HoldRecord{
		{Job: "b", State: hold.StateReleased, Outcome: events.Failed, Reason: "exit status 1", HeldSeconds: 1, Sweep: &events.SweepPoint{Index: 1, Value: "2"}},
		{Job: "a", State: hold.StateReleased, Outcome: events.Succeeded, HeldSeconds: 2, Sweep: &events.SweepPoint{Index: 0, Value: "1"}},
		{Job: "c", State: hold.StateWaiting, Sweep: &events.SweepPoint{Index: 2, Value: "3"}},
	}
	var b bytes.Buffer
	if err := client.Summarize("s", recs).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := `sweep s: 3 jobs, 3.000 s held in all
  states:   2 released, 1 waiting
  outcomes: 1 failed, 1 succeeded
  [1] value "2": failed: exit status 1 (b)
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestDeletionText(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	d := client.Deletion{Job: "j", Parts: []client.DeletionPart{{What: events.WhatData, DeletedAt: &at}, {What: events.WhatOutput, Requested: true}},
		Later: true}
	var b bytes.Buffer
	if err := d.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := "job j: data already deleted at 2026-12-01T00:00:00Z\njob j: deletion of its output requested; it is done when the job ends\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	d = client.Deletion{Job: "j", Deleted: []*events.Deleted{{What: events.WhatOutput, Files: 2, Bytes: 2048}}}
	if err := d.WriteText(&b); err != nil || b.String() != "job j: output deleted (2 file(s), 2 KiB)\n" {
		t.Errorf("got %q, %v", b.String(), err)
	}
}

func TestLimitEdit(t *testing.T) {
	e, err := client.LimitEdit("1MiB", "unlimited", "", []string{"alpine*"})
	if err != nil {
		t.Fatal(err)
	}
	if *e.MaxDataBytes != 1<<20 || *e.MaxQueued != limits.Unlimited || e.MaxRate != nil {
		t.Errorf("edit %+v", e)
	}
	if got := client.DescribePolicy(limits.Policy{MaxDataBytes: e.MaxDataBytes, MaxQueued: e.MaxQueued, Images: e.Images}); got != "max-data 1 MiB; max-queued unlimited; images alpine*" {
		t.Errorf("policy %q", got)
	}
	if got := client.DescribePolicy(limits.Policy{}); got != "the defaults" {
		t.Errorf("empty policy %q", got)
	}
	for _, c := range []struct {
		data, queued, rate string
		images             []string
		want               string
	}{
		{data: "lots", want: "max-data: "}, {queued: "0", want: "max-queued: "}, {rate: "1.5", want: "max-rate: "}, {images: []string{"a b"}, want: "allow-image "},
	} {
		_, err := client.LimitEdit(c.data, c.queued, c.rate, c.images)
		if !errors.Is(err, client.ErrInvalid) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrInvalid starting %q", c, err, c.want)
		}
	}
}

func TestLimitsText(t *testing.T) {
	r := client.LimitsReport{Limits: limits.Limits{Submitter: "alice", MaxDataBytes: limits.Unlimited, MaxQueued: 10, MaxRate: limits.Unlimited}, DataBytes: 1024}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := `submitter   alice
data        1 KiB of unlimited (max-data)
queued      at most 10 jobs (max-queued)
rate        at most unlimited jobs a minute (max-rate)
images      none
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestEventLineSaysWhatIsNotAnEvent(t *testing.T) {
	if got := client.EventLine(wire.StoredEvent{Seq: 7, Subject: "e31.job.x.requested.alice", Body: []byte(`{}`)}); !strings.HasPrefix(got, "#7      e31.job.x.requested.alice  (not a valid event: ") {
		t.Errorf("an event without headers: %q", got)
	}
}

func TestOutputAndAuditText(t *testing.T) {
	var b bytes.Buffer
	rec := &hold.HoldRecord{Output: hold.Output{Files: 2, Bytes: 3, Partial: true, Missing: []string{"a", "b"}}}
	if err := client.WriteOutputText(&b, rec, "out"); err != nil {
		t.Fatal(err)
	}
	if want := "2 file(s), 3 B, written to out (partial: the job did not finish)\nmissing: a, b\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	rep := &audit.Report{Findings: []audit.Finding{{Job: "j", Seq: 4, Kind: "gap", Detail: "no #3"}}}
	if err := client.WriteAuditText(&b, rep); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(b.String(), "\n"); len(lines) != 3 || lines[0] != "gap            j #4: no #3" || lines[1] != rep.Summary() {
		t.Errorf("audit text %q", b.String())
	}
}

func TestParseTime(t *testing.T) {
	for s, want := range map[string]time.Time{
		"2026-12-01":                time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
		"2026-12-01T10:00:00+01:00": time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC),
	} {
		if got, err := client.ParseTime(s); err != nil || !got.Equal(want) {
			t.Errorf("%s: %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := client.ParseTime("yesterday"); err == nil {
		t.Error("yesterday was read as a time")
	}
}

func TestSweepSucceeded(t *testing.T) {
	ok := &hold.HoldRecord{Outcome: events.Succeeded}
	if !client.Summarize("s", []*hold.HoldRecord{ok}).Succeeded() || client.Summarize("s", []*hold.HoldRecord{ok, {Outcome: events.Failed}}).Succeeded() {
		t.Error("Succeeded is not whether every job succeeded")
	}
}

func TestLimitsSetText(t *testing.T) {
	n := int64(1 << 20)
	set := client.LimitsSet{Policies: []client.KeyPolicy{{Key: "alice", Policy: limits.Policy{MaxDataBytes: &n}}}, Bounded: []string{"alice"}, MaxDataBytes: &n}
	var b bytes.Buffer
	if err := set.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := limits.Bucket + " alice: max-data 1 MiB\n" + events.DataBucketFor("alice") + ": at most 1 MiB (max-data)\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
