package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/natstest"
)

// storeRecords writes recs into the ledger's bucket as the ledger stores
// them (each beside state of the ledger's own, which the audit must
// skip), with a checkpoint as of applied, written last.
func storeRecords(t *testing.T, ctx context.Context, js jetstream.JetStream, recs []*hold.HoldRecord, applied uint64) jetstream.KeyValue {
	t.Helper()
	kv, err := js.KeyValue(ctx, events.LedgerBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		b, err := json.Marshal(map[string]any{"job": rec.Job, "made": 7, "record": rec, "ids": []string{"x", "y"}, "digest": "AAAA"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, events.LedgerRecordPrefix+rec.Job, b); err != nil {
			t.Fatal(err)
		}
	}
	putCheckpoint(t, ctx, kv, applied)
	return kv
}

func putCheckpoint(t *testing.T, ctx context.Context, kv jetstream.KeyValue, applied uint64) {
	t.Helper()
	b := fmt.Appendf(nil, `{"applied":%d,"chain":{"seq":%d,"hash":"x"},"records":3}`, applied, applied)
	if _, err := kv.Put(ctx, events.LedgerCheckpointKey, b); err != nil {
		t.Fatal(err)
	}
}

// findingKeys lists every finding as one sortable line.
func findingKeys(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, fmt.Sprintf("%s %s #%d %s", f.Kind, f.Job, f.Seq, f.Detail))
	}
	sort.Strings(out)
	return out
}

// TestRunFindsWhatRecordsFind: the ledger's records read from
// its bucket give the findings the same records give compared with every
// record kept: none when they agree; each changed field, changed event,
// missing and extra record when not; and an entry that is no record.
func TestRunFindsWhatRecordsFind(t *testing.T) {
	t.Parallel()
	l := busy(t, 60, 6)
	l.submitted("open").add("open", &events.ComputeHeld{Hold: holdOf("n1", 1, 1), Submitter: "alice", Spec: spec})
	last := uint64(len(l.raws))
	for _, tamper := range []bool{false, true} {
		t.Run(fmt.Sprintf("tampered=%v", tamper), func(t *testing.T) {
			t.Parallel()
			_, js := publish(t, l.raws)
			ctx := natstest.Context(t, 60*time.Second)
			var recs []*hold.HoldRecord
			for _, rec := range recordsOf(l.audit(Options{})) {
				if tamper {
					switch rec.Job {
					case "job-00003": // missing
						continue
					case "job-00007": // a field changed
						three := 3
						rec.ExitCode = &three
					case "job-00009": // an event changed
						rec.Events[4].Digest = "sha256:" + strings.Repeat("0", 64)
					case "job-00012": // after the end, a deletion the log does not have
						now := t0
						rec.Output.DeletedAt = &now
					case "open":
						rec.State = "released"
					}
				}
				recs = append(recs, rec)
			}
			if tamper {
				recs = append(recs, &hold.HoldRecord{Job: "ghost", State: hold.StateReleased})
			}
			want := l.audit(Options{})
			want.Compare(recs, true)
			kv := storeRecords(t, ctx, js, recs, last)
			if tamper {
				// Not a record at all: the ledger's own store gone wrong.
				if _, err := kv.Put(ctx, events.LedgerRecordPrefix+"job-00011", []byte("{not json")); err != nil {
					t.Fatal(err)
				}
			}
			a := New(Options{Forget: true})
			got, err := a.run(ctx, js, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			wantKeys := findingKeys(want)
			if tamper {
				wantKeys = append(wantKeys, "mismatch job-00011 #0 the ledger's entry for this job is not a record")
				sort.Strings(wantKeys)
			}
			gotKeys := findingKeys(got)
			for i := range gotKeys {
				if strings.HasPrefix(gotKeys[i], "mismatch job-00011 #0 the ledger's entry") {
					gotKeys[i] = "mismatch job-00011 #0 the ledger's entry for this job is not a record"
				}
			}
			if !reflect.DeepEqual(gotKeys, wantKeys) || got.Compared != want.Compared-btoi(tamper) || got.Moving != 0 {
				t.Errorf("from the bucket: %d compared, %d moving, %q\nwith every record kept: %d compared, %q", got.Compared, got.Moving, gotKeys, want.Compared, wantKeys)
			}
			// Only the records that differ are read again from the log.
			if again := 3 * btoi(tamper); a.readAgain != again {
				t.Errorf("%d jobs read again from the log, want %d", a.readAgain, again)
			}
		})
	}
}

// TestRunAsOfACheckpointBehind: a ledger whose checkpoint is
// behind where the audit read (it is catching up, or stopped) has records
// as of its checkpoint. They are right as of then: the audit holds those
// that differ from its own against the job rebuilt up to the checkpoint
// (a job open then and held since, a job over whose output was deleted
// since), and does not count a job the log began after it as missing. A
// record wrong as of the checkpoint is still found.
func TestRunAsOfACheckpointBehind(t *testing.T) {
	t.Parallel()
	l := busy(t, 60, 6)
	l.submitted("open")
	asOf := uint64(len(l.raws))
	l.add("open", &events.ComputeHeld{Hold: holdOf("n1", 1, 1), Submitter: "alice", Spec: spec})
	l.add("job-00001", &events.DeleteRequested{What: events.WhatAll, By: "alice"})
	l.add("job-00001", &events.Deleted{What: events.WhatOutput, Cause: events.CauseRequested})
	l.submitted("late").life("late", holdOf("n1", 1, 1), true)
	then := New(Options{})
	for _, r := range l.raws[:asOf] {
		then.Add(r)
	}
	recsThen := recordsOf(then.Finish())
	for _, tamper := range []bool{false, true} {
		t.Run(fmt.Sprintf("tampered=%v", tamper), func(t *testing.T) {
			t.Parallel()
			_, js := publish(t, l.raws)
			ctx := natstest.Context(t, 60*time.Second)
			var recs []*hold.HoldRecord
			for _, rec := range recsThen {
				c := *rec
				if tamper && c.Job == "job-00004" {
					c.Node = "elsewhere"
				}
				recs = append(recs, &c)
			}
			storeRecords(t, ctx, js, recs, asOf)
			a := New(Options{Forget: true})
			// The checkpoint stays where it is: the wait ends at settle.
			got, err := a.run(ctx, js, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			var wantKinds []string
			if tamper {
				wantKinds = []string{"mismatch job-00004"}
			}
			if k := kinds(got); !reflect.DeepEqual(k, wantKinds) || got.Compared != len(recsThen) || got.Moving != 1 {
				t.Errorf("as of #%d of #%d: %d compared of %d records then, %d moving (want 1, the job begun since): %q, want %q",
					asOf, len(l.raws), got.Compared, len(recsThen), got.Moving, findingKeys(got), wantKinds)
			}
			// The two jobs that moved since the checkpoint, and the one
			// whose record is wrong.
			if want := 2 + btoi(tamper); a.readAgain != want {
				t.Errorf("%d jobs read again from the log, want %d", a.readAgain, want)
			}
		})
	}
}

// TestRunWaitsForTheCheckpoint: an audit that read the log
// further than the ledger's last checkpoint waits for the next, and then
// compares every record as it is: the job begun since the checkpoint
// too, and none read again from the log.
func TestRunWaitsForTheCheckpoint(t *testing.T) {
	t.Parallel()
	l := busy(t, 30, 6)
	before := uint64(len(l.raws))
	recsBefore := recordsOf(l.audit(Options{}))
	l.submitted("late")
	_, js := publish(t, l.raws)
	ctx := natstest.Context(t, 60*time.Second)
	last := uint64(len(l.raws))
	storeRecords(t, ctx, js, recsBefore, before)
	a := New(Options{Forget: true})
	read := make(chan uint64, 100)
	a.readCheckpoint = func(applied uint64) { read <- applied }
	done := make(chan error, 1)
	var got *Report
	go func() {
		var err error
		got, err = a.run(ctx, js, time.Minute)
		done <- err
	}()
	// Read twice: the audit is waiting for the next, not comparing.
	for range 2 {
		select {
		case applied := <-read:
			if applied != before {
				t.Fatalf("the audit read the checkpoint as of #%d, written as of #%d", applied, before)
			}
		case err := <-done:
			t.Fatalf("the comparison ended (%v) with the ledger's checkpoint at #%d, behind the log's #%d", err, before, last)
		case <-ctx.Done():
			t.Fatal("the audit never read the ledger's checkpoint")
		}
	}
	// The ledger's next flush: the late job's record, then the
	// checkpoint.
	late := l.audit(Options{}).Records["late"]
	storeRecords(t, ctx, js, []*hold.HoldRecord{late}, last)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !got.OK() || got.Compared != len(recsBefore)+1 || got.Moving != 0 || a.readAgain != 0 {
		t.Errorf("%d compared of %d, %d moving, %d read again: %q", got.Compared, len(recsBefore)+1, got.Moving, a.readAgain, findingKeys(got))
	}
}

// TestRunBeforeTheLedgersFirstCheckpoint: a ledger that has
// written nothing yet (it is rebuilding from the log) has no record that
// is wrong or missing: every job is moving, and none is read again.
func TestRunBeforeTheLedgersFirstCheckpoint(t *testing.T) {
	t.Parallel()
	l := busy(t, 12, 6)
	l.submitted("open")
	_, js := publish(t, l.raws)
	ctx := natstest.Context(t, 60*time.Second)
	a := New(Options{Forget: true})
	got, err := a.run(ctx, js, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !got.OK() || got.Compared != 0 || got.Moving != 13 || a.readAgain != 0 {
		t.Errorf("%d compared, %d moving of 13, %d read again: %q", got.Compared, got.Moving, a.readAgain, findingKeys(got))
	}
	// Said, so that a pass is not taken for a comparison.
	if s := got.Summary(); !strings.Contains(s, "13 job(s) not compared this time") {
		t.Errorf("the summary does not say what was not compared: %s", s)
	}
}
