package output_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
)

// TestOutputForgetsJobsRetentionIsDoneWith: once the retention of many
// jobs passed and their output was deleted, OUTPUT keeps nothing of them
// (past KeepDeleted, by the log's clock); their objects still leave the
// store; and a late request to delete, a redelivered retention timer or
// sweep of a job it forgot record nothing twice and keep nothing.
func TestOutputForgetsJobsRetentionIsDoneWith(t *testing.T) {
	t.Parallel()
	w := startWorldKeeping(t, time.Second)
	const n = 6
	var objects []string
	for i := range n {
		job := fmt.Sprintf("job-f%d", i)
		w.runJob(t, job, time.Second, nil, map[string]string{"r.txt": fmt.Sprintf("result %d\n", i)})
		ret := w.waitEvent(t, job, func(e events.Event) bool { _, ok := e.(*events.OutputReturned); return ok }).Event.(*events.OutputReturned)
		objects = append(objects, w.objectsOf(t, stage.KindDir, ret.Manifest)...)
	}
	for i := range n {
		w.waitEvent(t, fmt.Sprintf("job-f%d", i), isDeleted(events.WhatOutput))
	}
	// A job an hour later, by the log's clock, that ends at once: by then
	// every deletion is older than KeepDeleted.
	later := bus.NewPublisher(w.js, "e31/test", func() time.Time { return time.Now().Add(time.Hour) })
	if _, err := later.Append(w.ctx, "job-later", &events.JobSubmitted{Submitter: "alice"}); err != nil {
		t.Fatal(err)
	}
	last, err := later.Append(w.ctx, "job-later", &events.JobRejected{Reason: "a marker"})
	if err != nil {
		t.Fatal(err)
	}
	w.storedAsOf(t, last.Seq)
	if got := w.svc.Retention().Tracked(); got != 0 {
		t.Errorf("OUTPUT keeps %d jobs after the retention of all %d passed and their deletions are an hour old, want none", got, n)
	}
	// Their objects leave the store all the same, swept from what the log
	// says when OUTPUT has forgotten the job.
	w.waitGone(t, objects)

	// Late: a request to delete, and the retention timer and the sweep
	// again, of a job OUTPUT forgot.
	w.append(t, "job-f0", &events.DeleteRequested{What: events.WhatAll, By: "alice"})
	late, err := w.pub.Append(w.ctx, "job-f1", &events.DeleteRequested{What: events.WhatOutput, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	w.storedAsOf(t, late.Seq)
	r := w.svc.Retention()
	for range 2 {
		if err := r.Settle(w.ctx, "job-f0"); err != nil {
			t.Fatalf("settle a forgotten job: %v", err)
		}
		if err := r.Sweep(w.ctx, "job-f0"); err != nil {
			t.Fatalf("sweep a forgotten job: %v", err)
		}
	}
	if got := w.deleted(t, "job-f0"); len(got) != 1 || got[0].What != events.WhatOutput || got[0].Cause != events.CauseExpired {
		t.Errorf("deletions of a forgotten job after late requests and timers: %+v, want its one expiry", got)
	}
	if got := r.Tracked(); got != 0 {
		t.Errorf("OUTPUT keeps %d jobs after late events about forgotten ones, want none", got)
	}
}

// storedAsOf waits until OUTPUT has read the log up to seq, by asking
// its stored endpoint as of seq.
func (w *world) storedAsOf(t *testing.T, seq uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 20*time.Second)
	defer cancel()
	body, err := json.Marshal(wire.StoredRequest{MinSeq: seq})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := query.Ask(ctx, w.js.Conn(), wire.OutputStoredSubject("operator"), body)
	if err != nil {
		t.Fatal(err)
	}
	var reply wire.StoredReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil || reply.Error != "" {
		t.Fatalf("stored as of #%d: %s (%v)", seq, msg.Data, err)
	}
}
