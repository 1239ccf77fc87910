package events_test

import (
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// BenchmarkMsg encodes a hold, the event RENT appends for every decision
// (it carries the job's whole spec), as the message that is published.
func BenchmarkMsg(b *testing.B) {
	spec := events.JobSpec{Name: "sched", Work: events.Work{Command: []string{"/bin/true"}}, Priority: 1,
		Request: events.Request{CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 64 << 20, LimitSeconds: 61}}
	ev := &events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n0001", CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 64 << 20},
		Submitter: "team-01", Spec: spec}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.New("job-000001", ev, "e31/rent/host", now).Msg(); err != nil {
			b.Fatal(err)
		}
	}
}
