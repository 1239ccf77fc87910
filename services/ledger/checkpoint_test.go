package ledger_test

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query/wire"
)

// TestLostAttemptIsNotBilled folds a job whose first attempt saved and was
// lost with its node, and whose second resumed and succeeded: the totals
// bill the second alone and show the first's held time as lost, the record
// keeps both attempts' held time, each attempt's saves and what the second
// resumed from, and a save the lost node sent after the loss is set aside.
func TestLostAttemptIsNotBilled(t *testing.T) {
	t.Parallel()
	var h history
	spec := specOf("train")
	h1, h2 := holdOn("n1", 1), holdOn("n2", 2)
	save := func(hd events.Hold, n int) *events.CheckpointSaved {
		return &events.CheckpointSaved{Hold: hd, N: n, Path: "ckpt", Manifest: "sha256:" + string(make64(byte('a'+n))),
			Files: 1, Bytes: 10 * int64(n), NewBytes: 10, Trigger: events.TriggerEvery}
	}
	zero := 0
	h.add("train-1", at("0s"), &events.JobRequested{Submitter: "alice", Spec: spec})
	h.add("train-1", at("100ms"), &events.JobSubmitted{Submitter: "alice", Spec: spec})
	h.add("train-1", at("1s"), &events.ComputeHeld{Hold: h1, Submitter: "alice", Spec: spec})
	h.add("train-1", at("2s"), &events.RunStarted{Hold: h1})
	h.add("train-1", at("3s"), save(h1, 1))
	h.add("train-1", at("4s"), save(h1, 2))
	h.add("train-1", at("10s"), &events.HoldLost{Hold: h1, Reason: "lease expired"})
	h.add("train-1", at("10.5s"), save(h1, 3)) // too late
	h.add("train-1", at("11s"), &events.ComputeReleased{Hold: h1, Outcome: events.NodeLost})
	h.add("train-1", at("12s"), &events.ComputeHeld{Hold: h2, Submitter: "alice", Spec: spec})
	h.add("train-1", at("13s"), &events.RunStarted{Hold: h2, ResumedFrom: "1.2"})
	h.add("train-1", at("14s"), &events.RunStopped{Hold: h2, Outcome: events.Succeeded, ExitCode: &zero})
	h.add("train-1", at("15s"), &events.OutputReturned{Hold: h2, Outcome: events.Succeeded, Files: []events.OutputFile{}, Missing: []string{}})
	h.add("train-1", at("16s"), &events.ComputeReleased{Hold: h2, Outcome: events.Succeeded, Final: true})
	p := project(t, h.envs)

	totals, err := p.Totals(wire.TotalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(totals) != 1 {
		t.Fatalf("totals %+v", totals)
	}
	got := totals[0]
	if got.Attempts != 1 || got.HeldSeconds != 4 || got.CPUCoreSeconds != 4 || got.LostAttempts != 1 || got.LostSeconds != 10 {
		t.Errorf("totals %+v: want 1 attempt of 4 s billed, 1 of 10 s lost", got)
	}
	r := p.Record("train-1")
	if r.HeldSeconds != 14 || r.LostSeconds != 10 || r.Attempts[0].HeldSeconds != 10 {
		t.Errorf("record held %v s, lost %v s, attempt 1 %v s: want 14, 10, 10", r.HeldSeconds, r.LostSeconds, r.Attempts[0].HeldSeconds)
	}
	if c := r.Attempts[0].Checkpoints; c == nil || c.Saves != 2 || c.Last != "1.2" || c.Bytes != 20 || !c.LastAt.Equal(at("4s")) {
		t.Errorf("attempt 1's saves %+v", c)
	}
	if a := r.Attempts[1]; a.ResumedFrom != "1.2" || a.Checkpoints != nil {
		t.Errorf("attempt 2 resumed from %q, saves %+v", a.ResumedFrom, a.Checkpoints)
	}
	if late := r.Events[7]; late.Type != "CheckpointSaved" || !late.SetAside {
		t.Errorf("the late save is listed as %+v, want set aside", late)
	}
}

func make64(b byte) []byte {
	out := make([]byte, 64)
	for i := range out {
		out[i] = b
	}
	return out
}
