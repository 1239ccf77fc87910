package retention_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/output/retention"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func digest(c byte) string { return "sha256:" + strings.Repeat(string([]byte{c, c}), 32) }

// history is one job's events, numbered from seq and a second apart.
func history(job string, seq uint64, evs ...events.Event) []events.Envelope {
	out := make([]events.Envelope, len(evs))
	for i, ev := range evs {
		out[i] = events.New(job, ev, "e31/test", t0.Add(time.Duration(i)*time.Second))
		out[i].Seq = seq + uint64(i)
	}
	return out
}

var (
	folder   = events.DataRef{Name: "in", Digest: digest('a'), Kind: stage.KindDir, Bytes: 300, Files: 3}
	oneFile  = events.DataRef{Name: "cfg", Digest: digest('b'), Kind: stage.KindFile, Bytes: 10}
	outHold  = events.Hold{Attempt: 1, Node: "n1", CPU: 1}
	returned = events.OutputReturned{Hold: outHold, Outcome: events.Succeeded, Files: []events.OutputFile{{Path: "r.csv", Bytes: 7, Digest: digest('c')}},
		Bytes: 7, Missing: []string{}, Manifest: digest('d')}
)

// printed is a whole job that stored no data and returned no file: all it
// left is its attempt's log. It ends at t0+4s.
func printed(job string, seq uint64) []events.Envelope {
	return history(job, seq,
		&events.JobSubmitted{Submitter: "alice"},
		&events.ComputeHeld{Hold: outHold},
		&events.RunStarted{Hold: outHold},
		&events.RunStopped{Hold: outHold, Outcome: events.Failed, Logs: &events.Logs{StderrBytes: 12}},
		&events.ComputeReleased{Hold: outHold, Outcome: events.Failed, Final: true})
}

// life is a whole job that stored data and returned output, with a day of
// retention, ending at t0+4s.
func life(job string, seq uint64, extra ...events.Event) []events.Envelope {
	spec := events.JobSpec{Data: []events.DataRef{folder, oneFile}, RetentionSeconds: 86400}
	evs := []events.Event{
		&events.JobSubmitted{Submitter: "alice", Spec: spec},
		&events.ComputeHeld{Hold: outHold},
		&events.RunStopped{Hold: outHold, Outcome: events.Succeeded, Output: events.Collected{Files: returned.Files, Bytes: 7, Manifest: digest('d')}},
		&returned,
		&events.ComputeReleased{Hold: outHold, Outcome: events.Succeeded, Final: true},
	}
	return history(job, seq, append(evs, extra...)...)
}

func TestRefsCountsWhatJobsHold(t *testing.T) {
	t.Parallel()
	r := retention.NewRefs()
	var timers []retention.Timer
	for _, e := range append(life("a", 1), life("b", 10)...) {
		timers = append(timers, r.Apply(e)...)
	}
	// Both jobs hold the same folder, file and output manifest.
	for _, root := range []retention.Root{{Tenant: "alice", Kind: stage.KindDir, Digest: digest('a')}, {Tenant: "alice", Kind: stage.KindFile, Digest: digest('b')}, {Tenant: "alice", Kind: stage.KindDir, Digest: digest('d')}} {
		if n := r.Count(root); n != 2 {
			t.Errorf("%v held %d times, want 2", root, n)
		}
	}
	end := t0.Add(4 * time.Second)
	want := []retention.Timer{{Kind: "expire", Job: "a", At: end.Add(24 * time.Hour)}, {Kind: "expire", Job: "b", At: end.Add(24 * time.Hour)}}
	if !reflect.DeepEqual(timers, want) {
		t.Errorf("timers %+v, want %+v", timers, want)
	}
	h := r.Job("a")
	if h.DataFiles != 4 || h.DataBytes != 310 || h.OutputFiles != 1 || h.OutputBytes != 7 || !h.Expires().Equal(end.Add(24*time.Hour)) {
		t.Errorf("held %+v", h)
	}

	// a's output goes: b still holds it all. Applying it twice is once.
	del := history("a", 20, &events.Deleted{What: events.WhatOutput, Cause: events.CauseRequested, Files: 1, Bytes: 7})[0]
	r.Apply(del)
	r.Apply(del)
	if n := r.Count(retention.Root{Tenant: "alice", Kind: stage.KindDir, Digest: digest('d')}); n != 1 {
		t.Errorf("output manifest held %d times after one deletion, want 1", n)
	}
	if n := r.Count(retention.Root{Tenant: "alice", Kind: stage.KindDir, Digest: digest('a')}); n != 2 {
		t.Errorf("data held %d times after the output was deleted, want 2", n)
	}
	if !h.Dropped[retention.Root{Tenant: "alice", Kind: stage.KindDir, Digest: digest('d')}] {
		t.Errorf("dropped %v, want the output manifest", h.Dropped)
	}
	if live := r.Live(); len(live) != 3 {
		t.Errorf("live roots %v", live)
	}
}

func TestRefsSetsTimers(t *testing.T) {
	t.Parallel()
	end := t0.Add(4 * time.Second)
	ask := events.DeleteRequested{What: events.WhatAll, By: "alice"}
	tests := []struct {
		name string
		evs  []events.Envelope
		want []retention.Timer
	}{
		{"a request after the end: at once",
			life("j", 1, &ask),
			[]retention.Timer{{"expire", "j", end.Add(24 * time.Hour)}, {"delete", "j", t0.Add(5 * time.Second)}}},
		{"a request before the end: at the end",
			history("j", 1, &events.JobSubmitted{Submitter: "alice", Spec: events.JobSpec{Data: []events.DataRef{oneFile}}}, &ask,
				&events.JobCancelled{Reason: "x"}),
			[]retention.Timer{{"expire", "j", t0.Add(2*time.Second + events.DefaultRetention)}, {"delete", "j", t0.Add(2 * time.Second)}}},
		{"a job that only printed: the retention of its logs",
			printed("j", 1),
			[]retention.Timer{{"expire", "j", t0.Add(4*time.Second + events.DefaultRetention)}}},
		{"a job that ran and wrote nothing: no timer (its stop says 0 and 0 bytes, so no log was stored)",
			history("j", 1, &events.JobSubmitted{Submitter: "alice"}, &events.ComputeHeld{Hold: outHold}, &events.RunStarted{Hold: outHold},
				&events.RunStopped{Hold: outHold, Outcome: events.Succeeded, Logs: &events.Logs{}},
				&events.OutputReturned{Hold: outHold, Outcome: events.Succeeded},
				&events.ComputeReleased{Hold: outHold, Outcome: events.Succeeded, Final: true}),
			nil},
		{"an attempt whose stop says nothing of its logs (lost with its node): they are kept",
			history("j", 1, &events.JobSubmitted{Submitter: "alice"}, &events.ComputeHeld{Hold: outHold}, &events.RunStarted{Hold: outHold},
				&events.RunStopped{Hold: outHold, Outcome: events.NodeLost},
				&events.ComputeReleased{Hold: outHold, Outcome: events.NodeLost, Final: true}),
			[]retention.Timer{{"expire", "j", t0.Add(4*time.Second + events.DefaultRetention)}}},
		{"a job that stored nothing: no timer",
			history("j", 1, &events.JobRequested{}, &events.JobRejected{Reason: "no"}),
			nil},
		{"from_job not resolved and rejected: nothing held",
			history("j", 1, &events.JobRequested{Spec: events.JobSpec{Data: []events.DataRef{{Name: "m", FromJob: "x"}}}}, &events.JobRejected{Reason: "no"}),
			nil},
	}
	for _, tt := range tests {
		r := retention.NewRefs()
		var got []retention.Timer
		for _, e := range tt.evs {
			got = append(got, r.Apply(e)...)
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: timers %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestDecideDelete(t *testing.T) {
	t.Parallel()
	end := t0.Add(4 * time.Second)
	expires := end.Add(24 * time.Hour)
	data := events.Deleted{What: events.WhatData, Cause: events.CauseExpired, Files: 4, Bytes: 310}
	out := events.Deleted{What: events.WhatOutput, Cause: events.CauseExpired, Files: 1, Bytes: 7}
	asked := func(what string) events.Event { return &events.DeleteRequested{What: what, By: "alice"} }
	requested := func(d events.Deleted) *events.Deleted { d.Cause, d.By = events.CauseRequested, "alice"; return &d }
	tests := []struct {
		name    string
		history []events.Envelope
		now     time.Time
		want    []events.Event
	}{
		{"running: nothing, even when asked", history("j", 1, &events.JobSubmitted{Spec: events.JobSpec{Data: []events.DataRef{oneFile}}}, asked(events.WhatAll)), expires, nil},
		{"over, retention not passed: nothing", life("j", 1), expires.Add(-time.Second), nil},
		{"retention passed: both", life("j", 1), expires, []events.Event{&data, &out}},
		{"asked for the output: only it", life("j", 1, asked(events.WhatOutput)), end, []events.Event{requested(out)}},
		{"asked for all", life("j", 1, asked(events.WhatAll)), end, []events.Event{requested(data), requested(out)}},
		{"asked for the output, then retention passed: the data expires", life("j", 1, asked(events.WhatOutput), requested(out)), expires, []events.Event{&data}},
		{"already deleted: nothing again", life("j", 1, &data, &out), expires.Add(time.Hour), nil},
		{"asked twice: once", life("j", 1, asked(events.WhatData), requested(data), asked(events.WhatData)), end, nil},
		{"no data staged: output only", history("j", 1,
			&events.JobSubmitted{},
			&returned,
			&events.ComputeReleased{Hold: outHold, Outcome: events.Succeeded, Final: true}), t0.Add(2*time.Second + events.DefaultRetention),
			[]events.Event{&events.Deleted{What: events.WhatOutput, Cause: events.CauseExpired, Files: 1, Bytes: 7}}},
		{"only printed: its output, its logs, expires", printed("j", 1), t0.Add(4*time.Second + events.DefaultRetention),
			[]events.Event{&events.Deleted{What: events.WhatOutput, Cause: events.CauseExpired}}},
		{"only printed, retention not passed: nothing", printed("j", 1), t0.Add(3*time.Second + events.DefaultRetention), nil},
	}
	for _, tt := range tests {
		if got := retention.DecideDelete(tt.history, tt.now); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\ngot  %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

// TestOnlyTheSubmitterDeletes: a deletion asked by anyone but the job's
// submitter (or the operator) is in the log and deletes nothing.
func TestOnlyTheSubmitterDeletes(t *testing.T) {
	h := life("j", 1, &events.DeleteRequested{What: events.WhatAll, By: "mallory"})
	if got := retention.DecideDelete(h, t0.Add(time.Minute)); len(got) != 0 {
		t.Errorf("mallory's request deleted %+v", got)
	}
	h = life("j", 1, &events.DeleteRequested{What: events.WhatOutput, By: events.Operator})
	if got := retention.DecideDelete(h, t0.Add(time.Minute)); len(got) != 1 {
		t.Errorf("the operator's request deleted %+v, want the output", got)
	}
}

// TestALaterRequestDoesNotMakeAJobAnotherTenants: anyone may publish a
// request under a job's id on its own tail; it must not let them delete
// what the job stored.
func TestALaterRequestDoesNotMakeAJobAnotherTenants(t *testing.T) {
	t.Parallel()
	r := retention.NewRefs()
	evs := life("v", 1)
	evs = append(evs, history("v", 10,
		&events.JobRequested{Submitter: "mallory", Spec: events.JobSpec{Data: []events.DataRef{oneFile}}},
		&events.DeleteRequested{By: "mallory", What: events.WhatAll})...)
	var timers []retention.Timer
	for _, e := range evs {
		timers = append(timers, r.Apply(e)...)
	}
	for _, tm := range timers {
		if tm.At.Equal(evs[len(evs)-1].Time) {
			t.Errorf("mallory's delete request set a timer: %+v", tm)
		}
	}
	if n := r.Count(retention.Root{Tenant: "mallory", Kind: stage.KindFile, Digest: digest('b')}); n != 0 {
		t.Errorf("mallory's data is held %d times by alice's job", n)
	}
}

// TestTheLogsGoWithTheOutput: a deletion of the output drops the logs of
// every attempt that ran, for the next sweep, and a deletion of the data
// leaves them.
func TestTheLogsGoWithTheOutput(t *testing.T) {
	t.Parallel()
	r := retention.NewRefs()
	second := events.Hold{Attempt: 2, Node: "n2", CPU: 1}
	evs := history("j", 1,
		&events.JobSubmitted{Submitter: "alice", Spec: events.JobSpec{Data: []events.DataRef{oneFile}}},
		&events.ComputeHeld{Hold: outHold},
		&events.RunStarted{Hold: outHold},
		&events.ComputeHeld{Hold: second},
		&events.RunStarted{Hold: second},
		&events.RunStopped{Hold: second, Outcome: events.Succeeded},
		&events.ComputeReleased{Hold: second, Outcome: events.Succeeded, Final: true},
		&events.Deleted{What: events.WhatData, Cause: events.CauseExpired})
	for _, e := range evs {
		r.Apply(e)
	}
	h := r.Job("j")
	if !reflect.DeepEqual(h.Logs, []int{1, 2}) || len(h.DroppedLogs) != 0 {
		t.Fatalf("after the data went: logs %v, dropped %v; want both attempts' logs held", h.Logs, h.DroppedLogs)
	}
	r.Apply(history("j", 9, &events.Deleted{What: events.WhatOutput, Cause: events.CauseExpired})[0])
	if len(h.Logs) != 0 || !reflect.DeepEqual(h.DroppedLogs, []int{1, 2}) {
		t.Errorf("after the output went: logs %v, dropped %v; want both attempts' logs dropped", h.Logs, h.DroppedLogs)
	}
}

// TestAStopFromAnotherNodeHoldsNothing: a node's start and stop of an
// attempt held elsewhere (or never held) name logs and output that are no
// part of the job: they are not held, and go with nothing of the job's.
func TestAStopFromAnotherNodeHoldsNothing(t *testing.T) {
	t.Parallel()
	r := retention.NewRefs()
	forged := events.Hold{Attempt: 1, Node: "mallory", CPU: 1}
	never := events.Hold{Attempt: 2, Node: "mallory", CPU: 1}
	for _, e := range history("j", 1,
		&events.JobSubmitted{Submitter: "alice"},
		&events.ComputeHeld{Hold: outHold},
		&events.RunStarted{Hold: forged},
		&events.RunStopped{Hold: forged, Outcome: events.Succeeded, Logs: &events.Logs{StdoutBytes: 1},
			Output: events.Collected{Files: returned.Files, Bytes: 7, Manifest: digest('e')}},
		&events.RunStopped{Hold: never, Outcome: events.Succeeded, Logs: &events.Logs{StdoutBytes: 1},
			Output: events.Collected{Files: returned.Files, Bytes: 7, Manifest: digest('e')}},
	) {
		r.Apply(e)
	}
	h := r.Job("j")
	if len(h.Logs) != 0 || len(h.Output) != 0 {
		t.Errorf("mallory's start and stop held logs %v and output %v", h.Logs, h.Output)
	}
	if n := r.Count(retention.Root{Tenant: "alice", Kind: stage.KindDir, Digest: digest('e')}); n != 0 {
		t.Errorf("mallory's manifest held %d times", n)
	}
}
