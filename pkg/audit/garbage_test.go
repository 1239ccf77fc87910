package audit

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/natstest"
)

// raw appends a message exactly as a plain client would publish it.
func (l *log) raw(subject string, body []byte, h nats.Header) *log {
	l.raws = append(l.raws, Raw{Seq: uint64(len(l.raws) + 1), Subject: subject, Headers: h, Body: body})
	return l
}

// envelope appends an event as someone other than its step would publish
// it: on another subject, or under another id.
func (l *log) envelope(subject string, env events.Envelope) *log {
	l.t.Helper()
	m, err := env.Msg()
	if err != nil {
		l.t.Fatal(err)
	}
	return l.raw(subject, m.Data, m.Header)
}

// garbage is what a tenant may publish on its own tail of job's subjects:
// it is set aside, and the job goes on as if it were not there. Requests
// are left out before the job's own: who publishes the first request under
// an id makes the job its own. It returns how many are set aside.
func (l *log) garbage(job string, requests bool) int {
	cancel := events.New(job, &events.CancelRequested{By: "mallory"}, "mallory", t0)
	cancel.ID = "whatever"
	l.raw("e31.job."+job+".cancel.mallory", []byte("junk"), nats.Header{"ce-type": {events.TypeCancelRequested}}).
		raw("e31.job."+job+".delete.mallory", nil, nats.Header{"Status": {"100"}}).
		envelope("e31.job."+job+".cancel.mallory", cancel)
	if !requests {
		return 2
	}
	second := events.New(job, &events.JobRequested{Submitter: "mallory", Spec: spec}, "mallory", t0)
	second.ID = job + "/requested/mine"
	l.raw("e31.job."+job+".requested.mallory", []byte("{not json"), nil).
		envelope("e31.job."+job+".requested.mallory", events.New(job, &events.JobRejected{Reason: "mallory says so"}, "mallory", t0)).
		envelope("e31.job."+job+".requested.mallory", second)
	return 5 // four that are no event, and the second request
}

func TestGarbageIsSetAsideAndChangesNoRecord(t *testing.T) {
	t.Parallel()
	clean := newLog(t)
	clean.submitted("victim").life("victim", holdOf("n1", 1, 1), true)
	want := clean.audit(Options{}).Records["victim"]

	l := newLog(t)
	n := l.garbage("victim", false)
	l.add("victim", &events.JobRequested{Submitter: "alice", Spec: spec})
	n += l.garbage("victim", true)
	l.add("victim", &events.JobSubmitted{Submitter: "alice", Spec: spec})
	n += l.garbage("victim", true)
	l.life("victim", holdOf("n1", 1, 1), true)
	n += l.garbage("victim", true)
	// An unreadable first request makes the job its publisher's, refused.
	l.raw("e31.job.mine.requested.mallory", []byte("{not json"), nil).add("mine", &events.JobRejected{Reason: "unreadable"})
	n++
	rep := l.audit(Options{})
	if !rep.OK() {
		t.Fatalf("audit after garbage: %s\n%v", rep.Summary(), rep.Findings)
	}
	if rep.SetAside != n {
		t.Errorf("set aside %d, want %d", rep.SetAside, n)
	}
	got := rep.Records["victim"]
	if got.Submitter != "alice" || got.State != want.State || got.Outcome != want.Outcome || got.HeldSeconds != want.HeldSeconds {
		t.Errorf("victim's record after garbage: submitter %s, %s, %s, %gs; want alice, %s, %s, %gs",
			got.Submitter, got.State, got.Outcome, got.HeldSeconds, want.State, want.Outcome, want.HeldSeconds)
	}
	if r := rep.Records["mine"]; r == nil || r.State != hold.StateRejected {
		t.Errorf("mine: %+v, want rejected", r)
	}
}

// TestReadStreamReadsPastAForgedStatus: an empty message with a Status
// header, which any tenant can store, stops no read of the log.
func TestReadStreamReadsPastAForgedStatus(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	l := newLog(t)
	l.submitted("victim")
	l.raw("e31.job.victim.delete.mallory", nil, nats.Header{"Status": {"409"}, "Description": {"Consumer Deleted"}}).
		raw("e31.job.victim.delete.mallory", nil, nats.Header{"Status": {"503"}})
	l.life("victim", holdOf("n1", 1, 1), true)
	for _, r := range l.raws {
		m := nats.NewMsg(r.Subject)
		m.Data, m.Header = r.Body, r.Headers
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	a := New(Options{})
	if err := a.ReadStream(ctx, js); err != nil {
		t.Fatal(err)
	}
	rep := a.Finish()
	if !rep.OK() || rep.Events != len(l.raws) || rep.SetAside != 2 {
		t.Errorf("%s: %d events, %d set aside, findings %v; want %d, 2, none", rep.Summary(), rep.Events, rep.SetAside, rep.Findings, len(l.raws))
	}
	// As read from the server, every message is as stored: the same chain.
	if want := l.audit(Options{}).Head; rep.Head != want {
		t.Errorf("chain head read from the server %s, built from the messages %s", rep.Head, want)
	}
}
