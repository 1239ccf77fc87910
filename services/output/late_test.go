package output_test

import (
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/output"
)

// A stop a node reports after RENT ended its attempt at its limit plus
// grace is set aside: its output is not returned, whether it lands before
// the attempt's release or after.
func TestHandleSetsAsideAStopAfterRENTEndedTheAttempt(t *testing.T) {
	t.Parallel()
	for _, released := range []bool{false, true} {
		f := start(t)
		svc := f.service(t, storeVerifier{f.store})
		file := f.upload(t, "result.csv", "the node's own bytes\n")
		h := events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 1 << 30}
		log := []events.Event{
			&events.ComputeHeld{Hold: h, Submitter: "alice"},
			&events.RunStarted{Hold: h},
			&events.HoldExpired{Hold: h, Deadline: time.Now().UTC(), Reason: "node n1 had not reported"},
		}
		if released {
			log = append(log, &events.ComputeReleased{Hold: h, Outcome: events.LimitExceeded, Final: true})
		}
		log = append(log, &events.RunStopped{Hold: h, Outcome: events.Succeeded,
			Output: events.Collected{Files: []events.OutputFile{file}, Missing: []string{}, Bytes: file.Bytes}})
		var stop events.Envelope
		for _, ev := range log {
			env, err := f.pub.Append(f.ctx, "job-1", ev)
			if err != nil {
				t.Fatal(err)
			}
			stop = env
		}
		if err := svc.Handle(f.ctx, stop); err != nil {
			t.Fatal(err)
		}
		if ret := f.returned(t, "job-1"); len(ret) != 0 {
			t.Errorf("released %v: the late stop's output was returned: %+v", released, ret)
		}
	}
}

// TestDecideSetsAsideAStopOnceItsAttemptEnded: a return that would land
// after RENT ended the attempt, or after its release, is not made.
func TestDecideSetsAsideAStopOnceItsAttemptEnded(t *testing.T) {
	t.Parallel()
	h := events.Hold{Attempt: 1, Node: "n1", CPU: 1}
	stop := events.RunStopped{Hold: h, Outcome: events.Succeeded, Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}}}
	for name, after := range map[string]events.Event{
		"expired":  &events.HoldExpired{Hold: h, Reason: "late"},
		"released": &events.ComputeReleased{Hold: h, Outcome: events.LimitExceeded, Final: true},
	} {
		if got := output.Decide(stop, nil, []events.Envelope{{Event: after}}); len(got) != 0 {
			t.Errorf("after the attempt was %s: decided %+v, want nothing", name, got)
		}
	}
	other := events.Hold{Attempt: 2, Node: "n1", CPU: 1}
	if got := output.Decide(stop, nil, []events.Envelope{{Event: &events.HoldExpired{Hold: other}}}); len(got) != 1 {
		t.Errorf("another attempt's expiry set the stop aside: %+v", got)
	}
}
