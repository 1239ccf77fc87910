package ledger

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestTwoFlushesOverOneBaseAreMadeRight: two instances build on one
// checkpoint, one ahead of the other, and both flushes are taken, the one
// behind last, as a server could if it lost track of the checkpoint's
// expected sequence (a NATS server killed in a cluster test run left 32
// records with every event past the checkpoint listed twice). The bucket
// then holds the entries of the instance ahead beside the checkpoint of
// the one behind. A ledger started from it must answer as one that folded
// the whole log, and leave the bucket true: each entry past the checkpoint
// is made again from the log, whether the job began before the checkpoint
// (job-0001, deleted after it) or after (jobs 40 to 49, every event ahead).
func TestTwoFlushesOverOneBaseAreMadeRight(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 120*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	appendJobs(t, ctx, pub, 0, 30)
	_, stop := run(t, nc, js) // the checkpoint both build on
	stop()

	behindAt := appendJobs(t, ctx, pub, 30, 10)
	if _, err := pub.Append(ctx, "job-0001", &events.Deleted{What: events.WhatData, By: "team-1"}); err != nil {
		t.Fatal(err)
	}
	last := appendJobs(t, ctx, pub, 40, 10)
	behind, stBehind := foldFromBucket(t, ctx, nc, js, behindAt)
	ahead, _ := foldFromBucket(t, ctx, nc, js, last)
	if err := ahead.Flush(); err != nil {
		t.Fatalf("the flush ahead: %v", err)
	}
	// The flush behind, without the sequence it expects: taken.
	msgs, err := stBehind.messages(behind.flushOf())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publishAtomic(context.Background(), nc, msgs, true); err != nil {
		t.Fatalf("the flush behind: %v", err)
	}

	var told mends
	svc, stop := runWith(t, nc, js, &told)
	if from, _ := svc.Started(); from != behindAt {
		t.Fatalf("the ledger started from #%d, want the checkpoint behind (#%d)", from, behindAt)
	}
	got := answers(t, nc, last)
	stop() // its last flush writes the entries made again
	// The operator is told: job-0001 and jobs 40 to 49, each once.
	if told != (mends{madeAgain: 11}) {
		t.Errorf("the ledger told its observer of %+v, want 11 entries made again and no event held already", told)
	}
	checkBucket(t, ctx, js)
	if whole := fromScratch(t, nc, js, last); got != whole {
		t.Errorf("a ledger started from the bucket answers\n%s\nwhere one that folded the whole log answers\n%s", got, whole)
	}
}

// mends counts what a ledger told its Observer.
type mends struct{ madeAgain, heldAlready int }

func (m *mends) MadeAgain(n int)   { m.madeAgain += n }
func (m *mends) HeldAlready(n int) { m.heldAlready += n }
func (m *mends) SetAside(int)      {}

// foldFromBucket opens a projection from the bucket, as an instance does,
// and folds the log into it up to last, without writing anything.
func foldFromBucket(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream, last uint64) (*Projection, *store) {
	t.Helper()
	st, err := openStore(ctx, nc, js)
	if err != nil {
		t.Fatal(err)
	}
	p, err := openProjection(st)
	if err != nil {
		t.Fatal(err)
	}
	foldUpTo(t, ctx, js, p, last)
	return p, st
}

// foldUpTo folds the log into p from where p is up to last.
func foldUpTo(t *testing.T, ctx context.Context, js jetstream.JetStream, p *Projection, last uint64) {
	t.Helper()
	for m, err := range bus.Stored(ctx, js, "", p.Applied()+1) {
		if err != nil {
			t.Fatal(err)
		}
		if m.Sequence > last {
			break
		}
		if err := p.ApplyStored(storedOf(m)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAnEventARecordHoldsIsNotFoldedInAgain: whatever brings the fold back
// to an event a record already lists (here its position set back, as a
// start from an older checkpoint would), the record is unchanged, the
// event is not listed twice, and the service is told which.
func TestAnEventARecordHoldsIsNotFoldedInAgain(t *testing.T) {
	t.Parallel()
	spec := events.JobSpec{Name: "j", Work: events.Work{Command: []string{"true"}}, Request: events.Request{CPU: 1, MemoryBytes: 1 << 30, LimitSeconds: 60}}
	h := events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 1 << 30}
	var log []Stored
	for i, ev := range []events.Event{
		&events.JobRequested{Submitter: "alice", Spec: spec},
		&events.JobSubmitted{Submitter: "alice", Spec: spec},
		&events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec},
		&events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true},
	} {
		m, err := events.New("job-1", ev, "e31/test", time.Unix(int64(1000+i), 0)).Msg()
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, Stored{Seq: uint64(i + 1), Subject: m.Subject, Header: m.Header, Data: m.Data})
	}
	p := NewProjection()
	for _, m := range log {
		if err := p.ApplyStored(m); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := json.Marshal(p.Record("job-1"))
	p.applied = 2 // behind the record, which lists #1 to #4
	for _, m := range log[2:] {
		if err := p.ApplyStored(m); err != nil {
			t.Fatal(err)
		}
	}
	if after, _ := json.Marshal(p.Record("job-1")); string(after) != string(before) {
		t.Errorf("the record changed when #3 and #4 came again:\n%s\nwas\n%s", after, before)
	}
	want := []heldEvent{{job: "job-1", seq: 3, last: 4}, {job: "job-1", seq: 4, last: 4}}
	if !reflect.DeepEqual(p.heldAlready, want) {
		t.Errorf("reported %+v, want %+v", p.heldAlready, want)
	}
}
