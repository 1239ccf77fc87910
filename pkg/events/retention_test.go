package events_test

import (
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

func TestDeletionIDsNameWhatTheyDelete(t *testing.T) {
	t.Parallel()
	for ev, want := range map[events.Event]string{
		&events.DeleteRequested{What: events.WhatOutput}: "j1/delete/output",
		&events.DeleteRequested{What: events.WhatAll}:    "j1/delete/all",
		&events.Deleted{What: events.WhatData}:           "j1/deleted/data",
	} {
		if got := events.ID("j1", ev); got != want {
			t.Errorf("ID(%+v) = %q, want %q", ev, got, want)
		}
		if !events.AfterEnd(ev) || events.Terminal(ev) {
			t.Errorf("%T may follow the end without ending anything", ev)
		}
	}
	if events.AfterEnd(&events.RunStarted{}) {
		t.Error("a RunStarted may not follow the end")
	}
}

func TestRetentionDefaults(t *testing.T) {
	t.Parallel()
	if got := (events.JobSpec{}).Retention(); got != events.DefaultRetention {
		t.Errorf("no retention: %s, want the default", got)
	}
	if got := (events.JobSpec{RetentionSeconds: 90}).Retention(); got != 90*time.Second {
		t.Errorf("90s: %s", got)
	}
	listed := events.OutputReturned{Files: make([]events.OutputFile, 3), Count: 5000}
	if listed.FileCount() != 5000 || (events.OutputReturned{Files: make([]events.OutputFile, 3)}).FileCount() != 3 {
		t.Error("FileCount counts what the list leaves out")
	}
}

func TestDeletedReason(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)
	history := []events.Envelope{
		events.New("j", &events.OutputReturned{}, "t", at),
		events.New("j", &events.Deleted{What: events.WhatOutput, Cause: events.CauseRequested, By: "ann"}, "t", at),
	}
	e, ok := events.DeletedOf(history, events.WhatOutput)
	if !ok {
		t.Fatal("not found")
	}
	if got := events.DeletedReason(e); got != "its output was deleted at 2026-05-01T08:00:00Z, on request of ann" {
		t.Errorf("reason %q", got)
	}
	if _, ok := events.DeletedOf(history, events.WhatData); ok {
		t.Error("data was not deleted")
	}
	e.Event = &events.Deleted{What: events.WhatData, Cause: events.CauseExpired}
	if got := events.DeletedReason(e); !strings.HasSuffix(got, "its retention passed") {
		t.Errorf("reason %q", got)
	}
}
