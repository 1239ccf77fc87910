package audit

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/natstest"
)

// inLedgerOrder sorts records as the ledger's flushes leave them in its
// bucket: by the last event each lists.
func inLedgerOrder(recs []*hold.HoldRecord) []*hold.HoldRecord {
	sort.Slice(recs, func(i, j int) bool { return lastListed(recs[i]) < lastListed(recs[j]) })
	return recs
}

func lastListed(r *hold.HoldRecord) uint64 {
	if n := len(r.Events); n > 0 {
		return r.Events[n-1].Seq
	}
	return 0
}

// TestRunLetsGoOfEachJobAsItsRecordIsCompared: with the ledger's records
// in its bucket in the order the ledger writes them, an audit holds at
// any time only the jobs that ended in about the last batch it read,
// not every job that ended: each is compared and let go of as the
// replay passes it. In the reverse order, the same audit finds the same,
// holding every job until the end.
func TestRunLetsGoOfEachJobAsItsRecordIsCompared(t *testing.T) {
	t.Parallel()
	const jobs = 600
	l := busy(t, jobs, 6)
	recs := inLedgerOrder(recordsOf(l.audit(Options{})))
	for _, reverse := range []bool{false, true} {
		t.Run(fmt.Sprintf("reverse=%v", reverse), func(t *testing.T) {
			t.Parallel()
			_, js := publish(t, l.raws)
			ctx := natstest.Context(t, 60*time.Second)
			order := slices.Clone(recs)
			if reverse {
				slices.Reverse(order)
			}
			storeRecords(t, ctx, js, order, uint64(len(l.raws)))
			a := New(Options{Forget: true})
			got, err := a.run(ctx, js, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d jobs held at most, %d let go of in step", a.maxHeld, a.letGo)
			if !got.OK() || got.Compared != jobs || a.readAgain != 0 {
				t.Fatalf("%d compared of %d, %d read again: %q", got.Compared, jobs, a.readAgain, findingKeys(got))
			}
			// A batch of the log (readBatch) holds about 64 jobs' lives.
			switch {
			case !reverse && (a.maxHeld > 2*readBatch/8 || a.letGo != jobs):
				t.Errorf("in the ledger's order, %d jobs held at most, %d let go of in step: want about a batch's (%d), and %d",
					a.maxHeld, a.letGo, readBatch/8, jobs)
			case reverse && a.maxHeld < jobs*3/4:
				t.Errorf("in reverse, %d jobs held at most: the test does not tell the orders apart", a.maxHeld)
			}
		})
	}
}

// TestRunJobsLetGoOfAndNamedAgain: a job compared and let go of in step
// may be named again by the log: retention deletes its output, its
// tenant asks again, an event of its life is stored again. The audit
// then judges what comes after the job's end as such, as an audit that
// keeps every job does, and compares its record again, whether the
// ledger's records are as of the end of the log or of before the tail.
func TestRunJobsLetGoOfAndNamedAgain(t *testing.T) {
	t.Parallel()
	const jobs = 200
	tails := []struct {
		name string
		tail func(l *log)
	}{
		{"output deleted", func(l *log) {
			l.add("job-00001", &events.DeleteRequested{What: events.WhatOutput, By: "alice"})
			l.add("job-00001", &events.Deleted{What: events.WhatOutput, Cause: events.CauseRequested})
		}},
		{"request repeated", func(l *log) {
			l.add("job-00002", &events.JobRequested{Submitter: "alice", Spec: spec})
		}},
		{"cancel asked", func(l *log) {
			l.add("job-00003", &events.CancelRequested{By: "alice"})
		}},
		{"released again", func(l *log) {
			h := holdOf("n1", 1, 1)
			l.add("job-00004", &events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true})
		}},
	}
	for _, tc := range tails {
		for _, behind := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/behind=%v", tc.name, behind), func(t *testing.T) {
				t.Parallel()
				l := busy(t, jobs, 6)
				asOf := uint64(len(l.raws))
				before := inLedgerOrder(recordsOf(l.audit(Options{})))
				tc.tail(l)
				for _, r := range l.raws[asOf:] {
					// Stored past the server's window for duplicates, as
					// a tenant's request repeated a day later is.
					r.Headers.Del(events.HeaderMsgID)
				}
				want := l.audit(Options{})
				recs := before
				if !behind {
					asOf, recs = uint64(len(l.raws)), inLedgerOrder(recordsOf(want))
				}
				_, js := publish(t, l.raws)
				ctx := natstest.Context(t, 60*time.Second)
				storeRecords(t, ctx, js, recs, asOf)
				a := New(Options{Forget: true})
				got, err := a.run(ctx, js, 100*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				gotKinds, wantKinds := kinds(got), kinds(want)
				sort.Strings(gotKinds)
				sort.Strings(wantKinds)
				if !reflect.DeepEqual(gotKinds, wantKinds) || got.Jobs != want.Jobs || got.SetAside != want.SetAside || got.Compared != jobs || got.Moving != 0 {
					t.Errorf("%d jobs, %d set aside, %d compared, %d moving, %q;\nwant %d, %d, %d, 0, %q (the audit that keeps every job)",
						got.Jobs, got.SetAside, got.Compared, got.Moving, gotKinds, want.Jobs, want.SetAside, jobs, wantKinds)
				}
				if a.revived == 0 && behind {
					t.Errorf("no job was read again: the test did not name a job let go of (%d let go of)", a.letGo)
				}
			})
		}
	}
}
