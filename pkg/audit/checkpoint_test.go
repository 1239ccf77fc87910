package audit

import (
	"slices"
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// TestCheckpointSavesAndResumes rebuilds a job whose first attempt saved
// twice and was lost, whose cut-off node sent one more save after the
// loss, and whose second attempt resumed from the last save that counts:
// the late save is set aside and named, the record shows each attempt's
// saves and what it resumed from, and the lost attempt's held time is
// shown apart. A resume that names no save is a finding.
func TestCheckpointSavesAndResumes(t *testing.T) {
	t.Parallel()
	l := newLog(t)
	l.submitted("ck")
	h1, h2 := holdOf("n1", 1, 1), holdOf("n1", 2, 1)
	save := func(h events.Hold, n int, bytes, sent int64) *events.CheckpointSaved {
		return &events.CheckpointSaved{Hold: h, N: n, Path: "ckpt", Manifest: "sha256:" + string(slices.Repeat([]byte{byte('a' + n)}, 64)),
			Files: 2, Bytes: bytes, NewBytes: sent, Trigger: events.TriggerEvery}
	}
	zero := 0
	l.add("ck", &events.ComputeHeld{Hold: h1, Submitter: "alice", Spec: spec}).
		add("ck", &events.RunStarted{Hold: h1}).
		add("ck", save(h1, 1, 100, 100)).
		add("ck", save(h1, 2, 120, 20)).
		add("ck", &events.HoldLost{Hold: h1, Reason: "lease expired"}).
		add("ck", save(h1, 3, 130, 10)). // the cut-off node, too late
		add("ck", &events.ComputeReleased{Hold: h1, Outcome: events.NodeLost}).
		add("ck", &events.ComputeHeld{Hold: h2, Submitter: "alice", Spec: spec}).
		add("ck", &events.RunStarted{Hold: h2, ResumedFrom: "1.2"}).
		add("ck", save(h2, 1, 140, 20)).
		add("ck", &events.RunStopped{Hold: h2, Outcome: events.Succeeded, ExitCode: &zero}).
		add("ck", &events.OutputReturned{Hold: h2, Outcome: events.Succeeded, Files: []events.OutputFile{}, Missing: []string{}}).
		add("ck", &events.ComputeReleased{Hold: h2, Outcome: events.Succeeded, Final: true})
	l.submitted("bad")
	l.add("bad", &events.ComputeHeld{Hold: h1, Submitter: "alice", Spec: spec}).
		add("bad", &events.RunStarted{Hold: h1, ResumedFrom: "1.7"})

	rep := l.audit(Options{})
	if got, want := kinds(rep), []string{Order + " ck", Inconsistent + " bad"}; !slices.Equal(got, want) {
		t.Fatalf("findings %v (%+v), want %v", got, rep.Findings, want)
	}
	r := rep.Records["ck"]
	a1, a2 := r.Attempts[0], r.Attempts[1]
	if c := a1.Checkpoints; c == nil || c.Saves != 2 || c.Last != "1.2" || c.Bytes != 120 || c.NewBytes != 120 {
		t.Errorf("attempt 1's saves %+v, want 2, the last 1.2 of 120 bytes, 120 sent", c)
	}
	if c := a2.Checkpoints; a2.ResumedFrom != "1.2" || c == nil || c.Saves != 1 || c.Last != "2.1" {
		t.Errorf("attempt 2 resumed from %q with saves %+v", a2.ResumedFrom, c)
	}
	if r.LostSeconds != a1.HeldSeconds || a1.HeldSeconds <= 0 || r.HeldSeconds != a1.HeldSeconds+a2.HeldSeconds {
		t.Errorf("lost %v s, held %v s, attempts %v + %v", r.LostSeconds, r.HeldSeconds, a1.HeldSeconds, a2.HeldSeconds)
	}
	aside := 0
	for _, e := range r.Events {
		if e.SetAside {
			aside++
		}
	}
	if aside != 1 {
		t.Errorf("%d events set aside, want the late save", aside)
	}
}
