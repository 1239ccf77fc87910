package retention_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/output/retention"
)

// TestACheckpointRebuildsWhatTheWholeLogDoes: a projection that reads the
// log from a checkpoint, taken at any point of it, stands where one that
// read the whole log does, at every point from the checkpoint's on: the
// same jobs kept, each holding the same, and every root counted the
// same. The log is weeks of jobs whose lives
// interleave: some store data and output that expire or that their
// submitter deletes, some hold only their logs, some store nothing, and
// jobs share a folder, so that a root outlives a job that held it.
func TestACheckpointRebuildsWhatTheWholeLogDoes(t *testing.T) {
	t.Parallel()
	log := weeksOfJobs(40)
	const keep = 24 * time.Hour
	skipped := 0
	for k := 0; k <= len(log); k += 3 {
		at := retention.NewRefs()
		at.Forget(keep)
		for _, env := range log[:k] {
			at.Apply(env)
		}
		c := at.Checkpoint()
		if c.From < 1 || c.From > uint64(k)+1 {
			t.Fatalf("checkpoint after %d events: from #%d, out of the log read", k, c.From)
		}
		skipped = max(skipped, int(c.From)-1)
		again := retention.NewRefs()
		again.Forget(keep)
		again.Restore(c)
		read := k // what at has read
		for i, env := range log[c.From-1:] {
			again.Apply(env)
			n := int(c.From) + i // what again has read
			if n < k {
				continue
			}
			for ; read < n; read++ {
				at.Apply(log[read])
			}
			if err := sameRefs(at, again); err != nil {
				t.Fatalf("from the checkpoint after %d events (#%d on), at #%d: %v", k, c.From, n, err)
			}
		}
	}
	// The checkpoints do leave most of the log unread: a test of
	// checkpoints that all say #1 would prove nothing.
	if skipped < len(log)/2 {
		t.Errorf("the latest checkpoint skips %d of %d events, want most of them", skipped, len(log))
	}
}

// sameRefs says how b differs from a, if it does.
func sameRefs(a, b *retention.Refs) error {
	if a.Tracked() != b.Tracked() {
		return fmt.Errorf("%d jobs kept, want %d", b.Tracked(), a.Tracked())
	}
	for _, h := range a.Jobs() {
		if got := b.Job(h.Job); !reflect.DeepEqual(got, h) {
			return fmt.Errorf("job %s holds %+v, want %+v", h.Job, got, h)
		}
	}
	if !reflect.DeepEqual(a.Live(), b.Live()) {
		return fmt.Errorf("roots held %v, want %v", b.Live(), a.Live())
	}
	for root := range a.Live() {
		if a.Count(root) != b.Count(root) {
			return fmt.Errorf("%v held %d times, want %d", root, b.Count(root), a.Count(root))
		}
	}
	return nil
}

// weeksOfJobs is a log of n jobs, one every six hours, with what OUTPUT
// records of them (deletions asked for, retention passed) at their time,
// in the order of time, numbered from 1.
func weeksOfJobs(n int) []events.Envelope {
	type timed struct {
		at time.Time
		ev events.Event
		of string
	}
	var all []timed
	add := func(job string, at time.Time, evs ...events.Event) time.Time {
		for _, ev := range evs {
			all = append(all, timed{at, ev, job})
			at = at.Add(time.Second)
		}
		return at
	}
	shared := folder // every fourth job stages the same folder
	for i := range n {
		job := fmt.Sprintf("job-%02d", i)
		start := t0.Add(time.Duration(i) * 6 * time.Hour)
		spec := events.JobSpec{RetentionSeconds: 86400}
		if i%4 == 0 {
			spec.Data = []events.DataRef{shared, {Name: "own", Digest: digest(byte('e' + i%20)), Kind: "file", Bytes: 5}}
		}
		switch i % 5 {
		case 0, 3, 4: // stores output (and maybe data), kept a day
			end := add(job, start,
				&events.JobRequested{Submitter: "alice", Spec: spec},
				&events.JobSubmitted{Submitter: "alice", Spec: spec},
				&events.RunStarted{Hold: outHold},
				&events.RunStopped{Hold: outHold, Outcome: events.Succeeded, Output: events.Collected{Files: returned.Files, Bytes: 7, Manifest: digest(byte('A' + i))}},
				&events.OutputReturned{Hold: outHold, Outcome: events.Succeeded, Files: returned.Files, Bytes: 7, Missing: []string{}, Manifest: digest(byte('A' + i))},
				&events.ComputeReleased{Hold: outHold, Outcome: events.Succeeded, Final: true})
			gone := end.Add(24 * time.Hour)
			if i%5 == 3 { // its submitter deletes it at once
				add(job, end, &events.DeleteRequested{What: events.WhatAll, By: "alice"})
				gone = end.Add(time.Minute)
			}
			cause := events.CauseExpired
			if i%5 == 3 {
				cause = events.CauseRequested
			}
			if len(spec.Data) > 0 {
				add(job, gone, &events.Deleted{What: events.WhatData, Cause: cause})
			}
			next := add(job, gone, &events.Deleted{What: events.WhatOutput, Cause: cause})
			if i%5 == 4 { // a late request, after everything went
				add(job, next.Add(time.Hour), &events.DeleteRequested{What: events.WhatAll, By: "alice"})
			}
		case 1: // holds only its logs, for the default retention
			end := add(job, start,
				&events.JobRequested{Submitter: "bob"},
				&events.JobSubmitted{Submitter: "bob"},
				&events.RunStarted{Hold: outHold},
				&events.RunStopped{Hold: outHold, Outcome: events.Failed, Logs: &events.Logs{StderrBytes: 12}},
				&events.ComputeReleased{Hold: outHold, Outcome: events.Failed, Final: true})
			add(job, end.Add(events.DefaultRetention), &events.Deleted{What: events.WhatOutput, Cause: events.CauseExpired})
		case 2: // stores nothing
			add(job, start,
				&events.JobRequested{Submitter: "carol"},
				&events.JobRejected{Reason: "request.limit: required"})
		}
	}
	slices.SortStableFunc(all, func(a, b timed) int { return a.at.Compare(b.at) })
	log := make([]events.Envelope, len(all))
	for i, e := range all {
		log[i] = events.New(e.of, e.ev, "e31/test", e.at)
		log[i].Seq = uint64(i + 1)
	}
	return log
}
