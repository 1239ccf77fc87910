package output_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/output/retention"
)

// TestARestartReadsFromTheCheckpoint: OUTPUT writes where its projection
// may be rebuilt from (its checkpoint, in its own bucket) as it goes and
// when it stops. Jobs that stored nothing come first in the log, then one
// that keeps data and output: an OUTPUT that starts again reads the log
// from that job's first event, not from the log's first, and still knows
// all the job holds: a deletion asked while OUTPUT was down deletes the
// job's data from the store.
func TestARestartReadsFromTheCheckpoint(t *testing.T) {
	t.Parallel()
	w := startWorld(t)
	for i := range 5 {
		job := fmt.Sprintf("job-nothing-%d", i)
		w.append(t, job, &events.JobSubmitted{Submitter: "alice"})
		w.append(t, job, &events.JobRejected{Reason: "request.limit: required"})
	}
	st, err := w.js.Stream(w.ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	first := st.CachedInfo().State.LastSeq + 1 // job-kept's first event
	data := w.folder(t, "in", map[string]string{"a.txt": "input\n"})
	w.runJob(t, "job-kept", 24*time.Hour, []events.DataRef{data}, map[string]string{"r.txt": "result\n"})
	// Returning does not wait for the projection: stopped before it has
	// read the log, OUTPUT rightly writes no checkpoint.
	select {
	case <-w.svc.Retention().CaughtUp():
	case <-w.ctx.Done():
		t.Fatal("the retention's projection never read the log")
	}
	if got := w.svc.Retention().ReadFrom(); got != 1 {
		t.Errorf("the first start read the log from #%d, want #1: there was no checkpoint", got)
	}
	w.stop()

	kv, err := w.js.KeyValue(w.ctx, events.OutputBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(w.ctx, events.OutputCheckpointKey)
	if err != nil {
		t.Fatalf("no checkpoint after OUTPUT stopped: %v", err)
	}
	var c retention.Checkpoint
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		t.Fatal(err)
	}
	if c.From != first {
		t.Errorf("checkpoint from #%d, want #%d, job-kept's first event: %s", c.From, first, e.Value())
	}

	w.append(t, "job-kept", &events.DeleteRequested{What: events.WhatData, By: "alice"})
	w.run(t)
	w.waitEvent(t, "job-kept", isDeleted(events.WhatData))
	w.waitGone(t, w.objectsOf(t, stage.KindDir, data.Digest))
	if got := w.svc.Retention().ReadFrom(); got != first {
		t.Errorf("the restart read the log from #%d, want #%d, the checkpoint's", got, first)
	}
}
