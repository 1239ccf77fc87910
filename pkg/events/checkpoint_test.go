package events_test

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// TestSavesRefuseWhatCameTooLate checks which saves count: the holder's,
// after its start, before the attempt's stop or loss. A node cut off and
// given up as lost cannot add a save afterwards, nor can another node.
func TestSavesRefuseWhatCameTooLate(t *testing.T) {
	t.Parallel()
	h1 := events.Hold{Attempt: 1, Node: "a"}
	h2 := events.Hold{Attempt: 2, Node: "b"}
	save := func(h events.Hold, n int) *events.CheckpointSaved {
		return &events.CheckpointSaved{Hold: h, N: n, Manifest: "sha256:" + string(rune('a'+n))}
	}
	history := []events.Envelope{
		{Seq: 1, Event: &events.JobSubmitted{}},
		{Seq: 2, Event: &events.ComputeHeld{Hold: h1}},
		{Seq: 3, Event: save(h1, 1)}, // before its start: refused
		{Seq: 4, Event: &events.RunStarted{Hold: h1}},
		{Seq: 5, Event: save(h1, 2)},                                 // counts
		{Seq: 6, Event: save(events.Hold{Attempt: 1, Node: "x"}, 3)}, // another node's: refused
		{Seq: 7, Event: &events.HoldLost{Hold: h1}},
		{Seq: 8, Event: save(h1, 4)}, // after the loss: refused
		{Seq: 9, Event: &events.ComputeReleased{Hold: h1}},
		{Seq: 10, Event: &events.ComputeHeld{Hold: h2}},
		{Seq: 11, Event: &events.RunStarted{Hold: h2, ResumedFrom: "1.2"}},
		{Seq: 12, Event: save(h1, 5)}, // the lost attempt's, late: refused
	}
	want := map[uint64]bool{3: false, 5: true, 6: false, 8: false, 12: false}
	var s events.Saves
	for _, e := range history {
		got := s.Accept(e.Event)
		if w, isSave := want[e.Seq]; isSave && got != w {
			t.Errorf("save at %d: accepted %v, want %v", e.Seq, got, w)
		} else if !isSave && got {
			t.Errorf("%T at %d accepted as a save", e.Event, e.Seq)
		}
	}
	last, ok := events.LastCheckpoint(history)
	if !ok || last.SaveName() != "1.2" {
		t.Fatalf("LastCheckpoint = %+v, %v; want save 1.2", last, ok)
	}
	if id := events.ID("job-1", last); id != "job-1/saved/1.2" {
		t.Errorf("ID = %s", id)
	}
	if _, ok := events.LastCheckpoint(history[:4]); ok {
		t.Error("LastCheckpoint found a save before any counted")
	}
}
