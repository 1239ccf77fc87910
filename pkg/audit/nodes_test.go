package audit

import (
	"reflect"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// TestANodesWordAboutAnotherNodesAttemptIsSetAside: mallory, a node,
// publishes under its own name a start and a stop of an attempt held on n1
// (with the ids n1's will have: a day of cpu, node_lost), garbage on its
// own subject of a stop, a stop of an attempt never held, and a stop after
// the job's end. Each is listed and set aside; the record is n1's; nothing
// is a finding. A ledger whose record counted mallory's stop is a finding
// that names it.
func TestANodesWordAboutAnotherNodesAttemptIsSetAside(t *testing.T) {
	t.Parallel()
	h := holdOf("n1", 1, 1)
	forged := h
	forged.Node = "mallory"
	zero := 0
	honest := newLog(t)
	honest.submitted("j").life("j", h, true)
	want := honest.audit(Options{}).Records["j"]

	l := newLog(t)
	l.submitted("j").add("j", &events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec}).
		add("j", &events.RunStarted{Hold: forged}).
		add("j", &events.RunStopped{Hold: forged, Outcome: events.NodeLost, Usage: events.Usage{CPUSeconds: 86400}})
	junk := l.raws[len(l.raws)-1]
	junk.Seq, junk.Body = uint64(len(l.raws)+1), []byte("{not json")
	l.raws = append(l.raws, junk)
	never := forged
	never.Attempt = 2
	l.add("j", &events.RunStopped{Hold: never, Outcome: events.Failed}).
		add("j", &events.RunStarted{Hold: h}).
		add("j", &events.RunStopped{Hold: h, Outcome: events.Succeeded, ExitCode: &zero}).
		add("j", &events.OutputReturned{Hold: h, Outcome: events.Succeeded, Files: []events.OutputFile{}, Missing: []string{}}).
		add("j", &events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true}).
		add("j", &events.RunStopped{Hold: forged, Outcome: events.Failed})
	rep := l.audit(Options{})
	if !rep.OK() {
		t.Fatalf("findings: %+v", rep.Findings)
	}
	if rep.SetAside != 5 {
		t.Errorf("set aside %d, want mallory's start, its three stops and its junk (5)", rep.SetAside)
	}
	got := rep.Records["j"]
	if got.Outcome != events.Succeeded || !reflect.DeepEqual(got.Usage, want.Usage) || len(got.Attempts) != 1 || got.Attempts[0].Node != "n1" {
		t.Errorf("record %+v, want n1's", got)
	}
	var aside []uint64
	for _, e := range got.Events {
		if e.SetAside {
			aside = append(aside, e.Seq)
		}
	}
	if want := []uint64{5, 6, 8, 13}; !equalSeqs(aside, want) {
		t.Errorf("set aside in the record: %v, want %v", aside, want)
	}

	// A ledger that counted mallory's stop.
	counted := *got
	counted.Events = append([]hold.EventRef(nil), got.Events...)
	counted.Events[4].SetAside = false // #6
	rep.Compare([]*hold.HoldRecord{&counted}, true)
	named := false
	for _, f := range rep.Findings {
		named = named || f.Kind == Mismatch && f.Seq == 6 && strings.Contains(f.Detail, "not held on")
	}
	if !named {
		t.Errorf("a ledger that counted mallory's stop: findings %+v, want one naming #6", rep.Findings)
	}
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
