package run_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run"
)

func TestDecideStart(t *testing.T) {
	t.Parallel()
	held := events.ComputeHeld{
		Hold:      events.Hold{Attempt: 2, Node: "n1", CPU: 1, MemoryBytes: 1 << 30, DiskBytes: 1 << 20},
		Submitter: "alice",
		Spec: events.JobSpec{
			Work:    events.Work{Command: []string{"/bin/true"}},
			Request: events.Request{CPU: 1, MemoryBytes: 1 << 30, DiskBytes: 1 << 20, LimitSeconds: 60},
			Output:  []events.OutputDecl{{Path: "result.csv", Required: true}},
		},
	}
	attempt := func(n int) events.Hold { h := held.Hold; h.Attempt = n; return h }
	// The attempt as another node, mallory, names it in what it publishes
	// under its own name.
	elsewhere := held.Hold
	elsewhere.Node = "mallory"
	zero := 0
	result := events.RunStopped{Hold: held.Hold, Outcome: events.Succeeded, ExitCode: &zero,
		Usage:  events.Usage{CPUSeconds: 0.5},
		Output: events.Collected{Files: []events.OutputFile{{Path: "result.csv", Bytes: 3, Digest: "sha256:ab"}}, Missing: []string{}, Declared: held.Spec.Output}}
	// What RUN records when the job never ran here: no output, but the
	// declaration, so that OUTPUT can tell what was required.
	none := events.Collected{Files: []events.OutputFile{}, Missing: []string{}, Declared: held.Spec.Output}

	var seq uint64
	logged := func(evs ...events.Event) []events.Envelope {
		var out []events.Envelope
		for _, ev := range evs {
			seq++
			env := events.New("job-1", ev, "e31/test", time.Unix(int64(seq), 0))
			env.Seq = seq
			out = append(out, env)
		}
		return out
	}
	cancel := events.CancelRequested{By: "alice"}

	tests := []struct {
		name      string
		after     []events.Envelope
		result    events.RunStopped
		hasResult bool
		want      []events.Event
	}{
		{
			name: "nothing happened since the hold: start",
			want: []events.Event{&events.RunStarted{Hold: held.Hold, Isolation: events.IsolationSandbox}},
		},
		{
			name:  "the attempt already stopped: nothing",
			after: logged(&events.RunStarted{Hold: held.Hold}, &result),
			want:  nil,
		},
		{
			name:   "the attempt already stopped, even with a result here: nothing",
			after:  logged(&events.RunStarted{Hold: held.Hold}, &result),
			result: result, hasResult: true,
			want: nil,
		},
		{
			name:   "this node holds the result of a run it could not record: that result",
			after:  logged(&events.RunStarted{Hold: held.Hold}),
			result: result, hasResult: true,
			want: []events.Event{&result},
		},
		{
			name:  "started but never stopped: lost with its node, never run twice",
			after: logged(&events.RunStarted{Hold: held.Hold}),
			want: []events.Event{&events.RunStopped{Hold: held.Hold, Outcome: events.NodeLost, Output: none,
				Reason: "the run node restarted while the job ran; e31 does not run an attempt twice"}},
		},
		{
			name:  "started, then a cancel: still lost with its node",
			after: logged(&events.RunStarted{Hold: held.Hold}, &cancel),
			want: []events.Event{&events.RunStopped{Hold: held.Hold, Outcome: events.NodeLost, Output: none,
				Reason: "the run node restarted while the job ran; e31 does not run an attempt twice"}},
		},
		{
			name:  "a cancel came first: stopped as cancelled, never started",
			after: logged(&cancel),
			want: []events.Event{&events.RunStopped{Hold: held.Hold, Outcome: events.Cancelled, Output: none,
				Reason: "cancelled before it started"}},
		},
		{
			name:  "the attempt was given up as lost with its node: nothing",
			after: logged(&events.HoldLost{Hold: held.Hold, Reason: "lease lapsed"}),
			want:  nil,
		},
		{
			name:   "the attempt was given up as lost, even with a result here: nothing",
			after:  logged(&events.RunStarted{Hold: held.Hold}, &events.HoldLost{Hold: held.Hold, Reason: "lease lapsed"}),
			result: result, hasResult: true,
			want: nil,
		},
		{
			name:   "the attempt was ended by RENT at its limit plus grace, even with a result here: nothing",
			after:  logged(&events.RunStarted{Hold: held.Hold}, &events.HoldExpired{Hold: held.Hold, Reason: "past its deadline"}),
			result: result, hasResult: true,
			want: nil,
		},
		{
			name:  "the attempt was already released: nothing",
			after: logged(&events.HoldLost{Hold: held.Hold}, &events.ComputeReleased{Hold: held.Hold, Outcome: events.NodeLost}),
			want:  nil,
		},
		{
			name: "another node's stop and start of the attempt: set aside, it starts",
			after: logged(&events.RunStopped{Hold: elsewhere, Outcome: events.NodeLost},
				&events.RunStarted{Hold: elsewhere}),
			want: []events.Event{&events.RunStarted{Hold: held.Hold, Isolation: events.IsolationSandbox}},
		},
		{
			name:  "a start and a stop of an earlier attempt do not count",
			after: logged(&events.RunStarted{Hold: attempt(1)}, &events.RunStopped{Hold: attempt(1), Outcome: events.NodeLost}),
			want:  []events.Event{&events.RunStarted{Hold: held.Hold, Isolation: events.IsolationSandbox}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := run.DecideStart(held, tt.after, tt.result, tt.hasResult, events.IsolationSandbox)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecideStart =\n %#v\nwant\n %#v", got, tt.want)
			}
		})
	}
}

func TestDecideStop(t *testing.T) {
	t.Parallel()
	h2 := events.Hold{Attempt: 2, Node: "n1", CPU: 1, MemoryBytes: 1 << 30}
	h1 := h2
	h1.Attempt = 1
	mallory := h2
	mallory.Node = "mallory"
	zero := 0
	stopped := events.RunStopped{Hold: h2, Outcome: events.Succeeded, ExitCode: &zero}
	tests := []struct {
		name  string
		after []events.Event
		want  []events.Event
	}{
		{"nothing happened since the start: the stop", nil, []events.Event{&stopped}},
		{"a cancel came meanwhile: the stop", []events.Event{&events.CancelRequested{By: "alice"}}, []events.Event{&stopped}},
		{"already recorded: nothing", []events.Event{&stopped}, nil},
		{"given up as lost with its node: nothing, a late result must not land", []events.Event{&events.HoldLost{Hold: h2}}, nil},
		{"already released: nothing", []events.Event{&events.HoldLost{Hold: h2}, &events.ComputeReleased{Hold: h2, Outcome: events.NodeLost}}, nil},
		{"ended by RENT at its limit plus grace: nothing, a stop that late is set aside", []events.Event{&events.HoldExpired{Hold: h2}}, nil},
		{"another attempt's end does not count", []events.Event{&events.HoldLost{Hold: h1}, &events.RunStopped{Hold: h1}}, []events.Event{&stopped}},
		{"another node's stop of the attempt does not count", []events.Event{&events.RunStopped{Hold: mallory, Outcome: events.Failed}}, []events.Event{&stopped}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var after []events.Envelope
			for i, ev := range tt.after {
				env := events.New("job-1", ev, "e31/test", time.Unix(int64(i), 0))
				env.Seq = uint64(10 + i)
				after = append(after, env)
			}
			if got := run.DecideStop(stopped, after); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecideStop =\n %#v\nwant\n %#v", got, tt.want)
			}
		})
	}
}
