package audit

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/events"
)

// retimed is m with its ce-time set to at: the log changed after it was
// written, as by someone who would hide a double run.
func retimed(m Raw, at time.Time) Raw {
	h := nats.Header{}
	for k, v := range m.Headers {
		h[k] = v
	}
	h.Set(events.HeaderTime, at.Format(time.RFC3339Nano))
	m.Headers = h
	return m
}

// TestOverlappingAttemptsAreFound: a job's attempts must not overlap by
// the stream's own times (each message's ce-time where it carries none). An attempt ends at its RunStopped or HoldLost,
// whichever comes first, or at its ComputeReleased; the next attempt's
// ComputeHeld may not be stamped earlier. The clean log passes; each
// tampered copy is found, at the later attempt's hold, naming the event
// that ended the earlier one.
func TestOverlappingAttemptsAreFound(t *testing.T) {
	t.Parallel()
	h1, h2 := holdOf("n1", 1, 1), holdOf("n1", 2, 1)
	l := newLog(t).submitted("j")
	// #4 held, #5 started, #6 lost, #7 released; attempt 2 from #8 on.
	l.add("j", &events.ComputeHeld{Hold: h1, Submitter: "alice", Spec: spec}).
		add("j", &events.RunStarted{Hold: h1}).
		add("j", &events.HoldLost{Hold: h1, Reason: "lease expired"}).
		add("j", &events.ComputeReleased{Hold: h1, Outcome: events.NodeLost}).
		life("j", h2, true)
	if rep := l.audit(Options{}); !rep.OK() {
		t.Fatalf("clean log: %+v", rep.Findings)
	}
	heldAgain := l.raws[7]
	at := func(m Raw) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, m.Headers.Get(events.HeaderTime))
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, c := range []struct {
		name  string
		i     int       // the message retimed
		to    time.Time // its new ce-time
		words string    // in the finding
	}{
		// Attempt 2 held before attempt 1 was given up.
		{"a hold stamped before the loss", 7, at(l.raws[5]).Add(-time.Millisecond), "before attempt 1 ended with HoldLost at #6"},
		// Attempt 1's loss stamped after attempt 2 was held.
		{"a loss stamped after the next hold", 5, at(heldAgain).Add(time.Second), "1s before attempt 1 ended with HoldLost at #6"},
	} {
		tampered := append([]Raw(nil), l.raws...)
		tampered[c.i] = retimed(tampered[c.i], c.to)
		rep := l.auditRaws(tampered)
		found := false
		for _, f := range rep.Findings {
			found = found || f.Kind == Overlap && f.Job == "j" && f.Seq == heldAgain.Seq && strings.Contains(f.Detail, c.words)
		}
		if !found {
			t.Errorf("%s: want an overlap finding at #%d saying %q; got %+v", c.name, heldAgain.Seq, c.words, rep.Findings)
		}
	}

	// A stop that came before the loss ends the attempt: one stamped
	// after the next hold is an overlap, though its loss was in time.
	l2 := newLog(t).submitted("k")
	l2.add("k", &events.ComputeHeld{Hold: h1, Submitter: "alice", Spec: spec}).
		add("k", &events.RunStarted{Hold: h1}).
		add("k", &events.RunStopped{Hold: h1, Outcome: events.NodeLost, Reason: "fenced"}).
		add("k", &events.OutputReturned{Hold: h1, Outcome: events.NodeLost, Files: []events.OutputFile{}, Missing: []string{}}).
		add("k", &events.ComputeReleased{Hold: h1, Outcome: events.NodeLost}).
		life("k", h2, true)
	tampered := append([]Raw(nil), l2.raws...)
	tampered[5] = retimed(tampered[5], at(l2.raws[8]).Add(500*time.Millisecond))
	rep := l2.auditRaws(tampered)
	found := false
	for _, f := range rep.Findings {
		found = found || f.Kind == Overlap && f.Seq == l2.raws[8].Seq && strings.Contains(f.Detail, "ended with RunStopped at #6")
	}
	if !found {
		t.Errorf("a stop stamped after the next hold: want an overlap finding at #%d; got %+v", l2.raws[8].Seq, rep.Findings)
	}

	// Where the messages carry the stream's own times, those count, not
	// a ce-time its publisher wrote: a node whose clock runs ahead stamps
	// its stop late, and that is no double run.
	stored := append([]Raw(nil), l.raws...)
	for i := range stored {
		stored[i].Stored = at(stored[i])
	}
	overlaps := func(raws []Raw) []Finding {
		var out []Finding
		for _, f := range l.auditRaws(raws).Findings {
			if f.Kind == Overlap {
				out = append(out, f)
			}
		}
		return out
	}
	if fs := overlaps(stored); len(fs) > 0 {
		t.Fatalf("clean log with the stream's times: %+v", fs)
	}
	skewed := append([]Raw(nil), stored...)
	skewed[5] = retimed(skewed[5], at(heldAgain).Add(time.Second)) // the loss's ce-time only
	if fs := overlaps(skewed); len(fs) > 0 {
		t.Errorf("a ce-time out of step, the stream's times in order: want no overlap finding; got %+v", fs)
	}
	moved := append([]Raw(nil), stored...)
	moved[7].Stored = moved[5].Stored.Add(-time.Millisecond) // the hold stored before the loss
	if fs := overlaps(moved); len(fs) != 1 || fs[0].Seq != heldAgain.Seq || !strings.Contains(fs[0].Detail, "by the stream's own times") {
		t.Errorf("a hold stored before the loss: want one overlap finding at #%d; got %+v", heldAgain.Seq, fs)
	}
}

// auditRaws audits raws in place of the log's own.
func (l *log) auditRaws(raws []Raw) *Report {
	a := New(Options{})
	for _, r := range raws {
		a.Add(r)
	}
	return a.Finish()
}
