package events_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/events"
)

// BenchmarkDecode decodes the events of one ordinary job's life, as the
// audit and every service's rebuild do for the whole log.
func BenchmarkDecode(b *testing.B) {
	spec := events.JobSpec{Name: "bench", Work: events.Work{Command: []string{"/bin/true"}},
		Request: events.Request{CPU: 1, MemoryBytes: 64 << 20, LimitSeconds: 60}}
	h := events.Hold{Attempt: 1, Node: "node-1", CPU: 1, MemoryBytes: 64 << 20}
	code := 0
	life := []events.Event{
		&events.JobRequested{Submitter: "alice", Spec: spec},
		&events.JobSubmitted{Submitter: "alice", Spec: spec},
		&events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec},
		&events.RunStarted{Hold: h},
		&events.RunStopped{Hold: h, Outcome: events.Succeeded, ExitCode: &code},
		&events.OutputReturned{Hold: h, Outcome: events.Succeeded},
		&events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true},
	}
	var msgs []*nats.Msg
	for _, ev := range life {
		m, err := events.New("job-1", ev, "e31/bench", time.Now()).Msg()
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m := msgs[i%len(msgs)]
		if _, err := events.Decode(m.Subject, m.Header, m.Data); err != nil {
			b.Fatal(err)
		}
	}
}
