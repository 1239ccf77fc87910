package events_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/events"
)

// FuzzDecode feeds the decoder what any publisher could put on the bus: it
// must never panic, and whatever it accepts must encode back to an event it
// accepts again, on the same subject.
func FuzzDecode(f *testing.F) {
	for _, ev := range []events.Event{
		&events.JobRequested{Submitter: "alice", Spec: events.JobSpec{Work: events.Work{Command: []string{"/bin/true"}}, Request: events.Request{CPU: 1, LimitSeconds: 60}}},
		&events.CancelRequested{By: "alice"},
		&events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1}, Submitter: "alice"},
		&events.RunStopped{Hold: events.Hold{Attempt: 1, Node: "n1"}, Outcome: events.Failed},
		&events.NodeAnnounced{Node: "job-1", Boot: "b", CPU: 2},
	} {
		m, err := events.New("job-1", ev, "e31/fuzz", time.Unix(0, 0)).Msg()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m.Subject, m.Header.Get(events.HeaderType), m.Header.Get(events.HeaderSubject), m.Header.Get(events.HeaderTime), m.Data)
	}
	f.Add("e31.job.x.requested.a", events.TypeJobRequested, "x", "2026-01-01T00:00:00Z", []byte(`{"submitter":"a","spec":{"work":{"command":[]}}}}`))
	f.Add("e31.job.x.stopped", events.TypeRunStopped, "x", "bad", []byte(`[`))
	f.Fuzz(func(t *testing.T, subject, ceType, ceSubject, ceTime string, body []byte) {
		h := nats.Header{}
		h.Set(events.HeaderSpecVersion, "1.0")
		h.Set(events.HeaderID, ceSubject+"/x")
		h.Set(events.HeaderType, ceType)
		h.Set(events.HeaderSource, "fuzz")
		h.Set(events.HeaderSubject, ceSubject)
		h.Set(events.HeaderTime, ceTime)
		env, err := events.Decode(subject, h, body)
		if err != nil {
			return
		}
		again, err := events.New(env.Subject, env.Event, "fuzz", env.Time).Msg()
		if err != nil {
			t.Fatalf("accepted %s on %s but cannot encode it again: %v", ceType, subject, err)
		}
		if again.Subject != subject {
			t.Fatalf("accepted on %s, but it belongs on %s", subject, again.Subject)
		}
		back, err := events.Decode(again.Subject, again.Header, again.Data)
		if err != nil {
			t.Fatalf("accepted %s, but not once encoded again: %v", body, err)
		}
		a, _ := json.Marshal(env.Event)
		b, _ := json.Marshal(back.Event)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the event: %s became %s", a, b)
		}
	})
}
