package audit

import (
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// gpuLog is a log of a node with two GPUs, on which a and b each hold one
// at the same time.
func gpuLog(t *testing.T) (l *log, heldB uint64) {
	l = &log{t: t}
	l.add("n1", &events.NodeAnnounced{Node: "n1", Boot: "b1", CPU: 2, MemoryBytes: 4 << 30, GPU: 2, DiskBytes: 8 << 30,
		Devices: []events.Device{{UUID: "GPU-0", Minor: 0, Bus: "0000:1b:00.0"}, {UUID: "GPU-1", Minor: 1, Bus: "0000:1c:00.0"}}})
	gspec := spec
	gspec.Request.GPU = 1
	ha, hb := holdOf("n1", 1, 1), holdOf("n1", 1, 1)
	ha.GPU, ha.GPUs = 1, []string{"GPU-0"}
	hb.GPU, hb.GPUs = 1, []string{"GPU-1"}
	zero := 0
	for _, j := range []string{"a", "b"} {
		l.add(j, &events.JobRequested{Submitter: "alice", Spec: gspec}).add(j, &events.JobSubmitted{Submitter: "alice", Spec: gspec})
	}
	l.add("a", &events.ComputeHeld{Hold: ha, Submitter: "alice", Spec: gspec}).add("a", &events.RunStarted{Hold: ha})
	l.add("b", &events.ComputeHeld{Hold: hb, Submitter: "alice", Spec: gspec})
	heldB = uint64(len(l.raws))
	for _, s := range []struct {
		job string
		h   events.Hold
	}{{"b", hb}, {"a", ha}} {
		if s.job == "b" {
			l.add("b", &events.RunStarted{Hold: hb})
		}
		l.add(s.job, &events.RunStopped{Hold: s.h, Outcome: events.Succeeded, ExitCode: &zero}).
			add(s.job, &events.OutputReturned{Hold: s.h, Outcome: events.Succeeded, Files: []events.OutputFile{}, Missing: []string{}}).
			add(s.job, &events.ComputeReleased{Hold: s.h, Outcome: events.Succeeded, Final: true})
	}
	return l, heldB
}

func TestTheAuditProvesNoDeviceWasHeldTwiceAtOnce(t *testing.T) {
	t.Parallel()
	l, heldB := gpuLog(t)
	clean := l.audit(Options{})
	if !clean.OK() {
		t.Fatalf("clean log: %+v", clean.Findings)
	}
	for _, job := range []string{"a", "b"} {
		a := clean.Records[job].Attempts[0]
		want := map[string]string{"a": "GPU-0", "b": "GPU-1"}[job]
		if len(a.Held.GPUs) != 1 || a.Held.GPUs[0] != want || a.GPUSecondsByDevice[want] != a.HeldSeconds || a.GPUSeconds != a.HeldSeconds {
			t.Errorf("record of %s: held %v, gpu seconds %g by device %v over %gs; want %s for the whole hold", job, a.Held.GPUs, a.GPUSeconds, a.GPUSecondsByDevice, a.HeldSeconds, want)
		}
	}

	// Tampered event: b's hold names a's device, as if RENT had given it
	// twice.
	tampered := append([]Raw(nil), l.raws...)
	m := tampered[heldB-1]
	m.Body = []byte(strings.Replace(string(m.Body), `"gpus":["GPU-1"]`, `"gpus":["GPU-0"]`, 1))
	if string(m.Body) == string(tampered[heldB-1].Body) {
		t.Fatal("the tamper changed nothing")
	}
	tampered[heldB-1] = m
	a := New(Options{})
	for _, r := range tampered {
		a.Add(r)
	}
	rep := a.Finish()
	found := false
	for _, f := range rep.Findings {
		found = found || f.Kind == Device && f.Seq == heldB && f.Job == "b" &&
			strings.Contains(f.Detail, "device GPU-0 held by attempt 1 of job b while attempt 1 of job a holds it")
	}
	if !found {
		t.Errorf("one device under two jobs was not caught: %+v", rep.Findings)
	}

	// Tampered record: the ledger's record of b says it held a's device.
	recs := recordsOf(clean)
	for i, r := range recs {
		if r.Job == "b" {
			c := *r
			c.Attempts = append([]hold.Attempt(nil), r.Attempts...)
			c.Attempts[0].Held.GPUs = []string{"GPU-0"}
			recs[i] = &c
		}
	}
	rep = l.audit(Options{})
	rep.Compare(recs, true)
	found = false
	for _, f := range rep.Findings {
		found = found || f.Kind == Mismatch && f.Job == "b"
	}
	if !found {
		t.Errorf("a record naming another job's device was not caught: %+v", rep.Findings)
	}
}

func TestTheAuditFindsADeviceTheNodeNeverAnnounced(t *testing.T) {
	t.Parallel()
	l := newLog(t) // n1 announces one GPU, by count
	h := holdOf("n1", 1, 1)
	h.GPU, h.GPUs = 1, []string{"GPU-9"}
	gspec := spec
	gspec.Request.GPU = 1
	l.add("a", &events.JobRequested{Submitter: "alice", Spec: gspec}).add("a", &events.JobSubmitted{Submitter: "alice", Spec: gspec}).
		add("a", &events.ComputeHeld{Hold: h, Submitter: "alice", Spec: gspec})
	rep := l.audit(Options{})
	found := false
	for _, f := range rep.Findings {
		found = found || f.Kind == Device && strings.Contains(f.Detail, "GPU-9, which node n1 did not announce")
	}
	if !found {
		t.Errorf("a hold of a device the node never announced: %+v", rep.Findings)
	}
}
