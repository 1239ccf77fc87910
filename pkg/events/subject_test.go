package events_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

func TestParseSubject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subject string
		want    events.Subject
	}{
		{"e31.job.j-1.submitted", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "submitted"}},
		{"e31.job.j-1.held.n1", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "held", Node: "n1"}},
		{"e31.job.j-1.started.n1", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "started", Node: "n1"}},
		{"e31.job.j-1.stopped.n1", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "stopped", Node: "n1"}},
		// Where starts and stops were stored before they named their node.
		{"e31.job.j-1.started", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "started"}},
		{"e31.job.j-1.stopped", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "stopped"}},
		{"e31.job.j-1.requested.alice", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "requested", Identity: "alice"}},
		{"e31.job.j-1.cancel.operator", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "cancel", Identity: "operator"}},
		{"e31.job.j-1.delete.bob", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "delete", Identity: "bob"}},
		{"e31.job.j-1.some_new_kind", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "some_new_kind"}},
		{"e31.node.n1.announced", events.Subject{Space: events.SpaceNode, Node: "n1", Kind: "announced"}},
		{"e31.logs.alice.j-1.2", events.Subject{Space: events.SpaceLogs, Identity: "alice", Job: "j-1", Attempt: 2}},
		{"e31.logs.alice.j-1.2.n1", events.Subject{Space: events.SpaceLogs, Identity: "alice", Job: "j-1", Attempt: 2, Node: "n1"}},
		{"e31.timer.at.expire.j-1", events.Subject{Space: events.SpaceTimer, Kind: "expire", Job: "j-1"}},
		{"e31.timer.due.sweep.j-1", events.Subject{Space: events.SpaceTimer, Kind: "sweep", Job: "j-1", Due: true}},
		{"e31.poison.rent", events.Subject{Space: events.SpacePoison, Service: "rent"}},
		{"e31.gate.n1.get", events.Subject{Space: events.SpaceGate, Node: "n1", Kind: "get"}},
		{"e31.gate.n1.chunk.s-1", events.Subject{Space: events.SpaceGate, Node: "n1", Kind: "chunk", Session: "s-1"}},
	}
	for _, tt := range tests {
		got, err := events.ParseSubject(tt.subject)
		if err != nil {
			t.Errorf("ParseSubject(%q): %v", tt.subject, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseSubject(%q) = %+v, want %+v", tt.subject, got, tt.want)
		}
		if s := got.String(); s != tt.subject {
			t.Errorf("ParseSubject(%q).String() = %q", tt.subject, s)
		}
	}
}

func TestParseSubjectRefuses(t *testing.T) {
	t.Parallel()
	for _, subject := range []string{
		"",
		"e31",
		"e31.",
		"e32.job.j.submitted",
		"e31.job",
		"e31.job.j",
		"e31.job.j.held",            // a hold names its node
		"e31.job.j.requested",       // a request names its submitter
		"e31.job.j.submitted.extra", // only some kinds carry one more token
		"e31.job.j.stopped.n1.x",    // and only one
		"e31.job.j.held.n1.x",
		"e31.job.j.requested.alice.x", // and only one
		"e31.job.*.submitted",         // a filter, not a subject
		"e31.job.>",
		"e31.job.j..submitted",
		"e31.job.-j.submitted", // not a valid id
		"e31.job.j.submitted.",
		"e31.node.n1",
		"e31.node.n1.announced.x",
		"e31.logs.alice.j.0", // attempts count from 1
		"e31.logs.alice.j.01",
		"e31.logs.alice.j.x",
		"e31.logs.alice.j",
		"e31.logs.alice.j.1.n1.x",
		"e31.timer.soon.expire.j",
		"e31.timer.at.expire",
		"e31.poison",
		"e31.poison.rent.x",
		"e31.gate.n1",
		"e31.gate.n1.chunk",           // a chunk names its session
		"e31.gate.n1.get.x",           // nothing else does
		"e31.gate.n1.chunk.s.x",       // and only one
		"e31.api.alice.ledger.record", // the query side's, not the log's
		"e31.weird.x",
		"e31.job." + strings.Repeat("j", 65) + ".submitted",
	} {
		if s, err := events.ParseSubject(subject); !errors.Is(err, events.ErrSubject) {
			t.Errorf("ParseSubject(%q) = %+v, %v; want ErrSubject", subject, s, err)
		}
	}
}

// TestSubjectOfParses checks that where every kind of event is stored
// reads back as what it is.
func TestSubjectOfParses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ev   events.Event
		want events.Subject
	}{
		{&events.JobRequested{Submitter: "alice"}, events.Subject{Space: events.SpaceJob, Job: "x", Kind: "requested", Identity: "alice"}},
		{&events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1"}}, events.Subject{Space: events.SpaceJob, Job: "x", Kind: "held", Node: "n1"}},
		{&events.CancelRequested{By: "bob"}, events.Subject{Space: events.SpaceJob, Job: "x", Kind: "cancel", Identity: "bob"}},
		{&events.DeleteRequested{By: "bob", What: events.WhatData}, events.Subject{Space: events.SpaceJob, Job: "x", Kind: "delete", Identity: "bob"}},
		{&events.RunStarted{Hold: events.Hold{Attempt: 1, Node: "n1"}}, events.Subject{Space: events.SpaceJob, Job: "x", Kind: "started", Node: "n1"}},
		{&events.RunStopped{Hold: events.Hold{Attempt: 1, Node: "n1"}}, events.Subject{Space: events.SpaceJob, Job: "x", Kind: "stopped", Node: "n1"}},
		{&events.NodeAnnounced{Node: "x", Boot: "b"}, events.Subject{Space: events.SpaceNode, Node: "x", Kind: "announced"}},
	}
	for _, tt := range tests {
		subject, err := events.SubjectOf("x", tt.ev)
		if err != nil {
			t.Fatalf("SubjectOf(%T): %v", tt.ev, err)
		}
		got, err := events.ParseSubject(subject)
		if err != nil || got != tt.want {
			t.Errorf("ParseSubject(SubjectOf(%T)) = %+v, %v; want %+v", tt.ev, got, err, tt.want)
		}
	}
	if got := events.RequestSubject("j", "alice"); got != "e31.job.j.requested.alice" {
		t.Errorf("RequestSubject = %q", got)
	}
	if got := events.LogSubject("alice", "j", 3, "n1"); got != "e31.logs.alice.j.3.n1" {
		t.Errorf("LogSubject = %q", got)
	}
	if got := events.NodeLogSubjects("n1"); got != "e31.logs.*.*.*.n1" {
		t.Errorf("NodeLogSubjects = %q", got)
	}
	if got := events.KindSubject(events.TypeComputeHeld); got != "e31.job.*.held.*" {
		t.Errorf("KindSubject(held) = %q", got)
	}
	if got := events.KindSubject(events.TypeRunStopped); got != "e31.job.*.stopped.*" {
		t.Errorf("KindSubject(stopped) = %q", got)
	}
	if got := events.KindSubjects(events.TypeRunStopped); !slices.Equal(got, []string{"e31.job.*.stopped.*", "e31.job.*.stopped"}) {
		t.Errorf("KindSubjects(stopped) = %q, want the subject of now and the one from before", got)
	}
	if got := events.KindSubjects(events.TypeComputeHeld); !slices.Equal(got, []string{"e31.job.*.held.*"}) {
		t.Errorf("KindSubjects(held) = %q", got)
	}
	if got := events.HeldSubject("n1"); got != "e31.job.*.held.n1" {
		t.Errorf("HeldSubject = %q", got)
	}
	if got := events.TimerSubject("expire", "j", true); got != "e31.timer.due.expire.j" {
		t.Errorf("TimerSubject = %q", got)
	}
	if got := events.PoisonSubject("rent"); got != "e31.poison.rent" {
		t.Errorf("PoisonSubject = %q", got)
	}
}

// FuzzParseSubject checks the round trip: whatever ParseSubject accepts,
// String gives back byte for byte, and it parses again to the same parts.
func FuzzParseSubject(f *testing.F) {
	for _, s := range []string{
		"e31.job.j-1.submitted", "e31.job.j.held.n1", "e31.job.j.stopped.n1", "e31.job.j.started", "e31.logs.a.j.1.n1", "e31.job.j.requested.alice", "e31.job.j.cancel.bob",
		"e31.node.n1.expired", "e31.logs.alice.j.12", "e31.timer.due.expire.j", "e31.poison.output",
		"e31.job.j.held", "e31.logs.a.j.0", "e31.job..x",
	} {
		f.Add(s)
	}
	m, err := events.New("job-1", &events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1"}}, "fuzz", time.Unix(0, 0)).Msg()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(m.Subject)
	f.Fuzz(func(t *testing.T, subject string) {
		s, err := events.ParseSubject(subject)
		if err != nil {
			if s != (events.Subject{}) {
				t.Fatalf("ParseSubject(%q) refused with parts %+v", subject, s)
			}
			return
		}
		if got := s.String(); got != subject {
			t.Fatalf("ParseSubject(%q).String() = %q", subject, got)
		}
		again, err := events.ParseSubject(s.String())
		if err != nil || again != s {
			t.Fatalf("ParseSubject(%q) again = %+v, %v; want %+v", subject, again, err, s)
		}
		if events.JobOf(subject) != s.Job {
			t.Fatalf("JobOf(%q) = %q, want %q", subject, events.JobOf(subject), s.Job)
		}
	})
}

// TestANodesEventSpeaksForTheNodeItsSubjectNames checks that a start, a
// stop or an announcement decodes only on the subject of the node its body
// names, and that a start or a stop stored before subjects named the node
// still decodes where it was.
func TestANodesEventSpeaksForTheNodeItsSubjectNames(t *testing.T) {
	t.Parallel()
	at := time.Unix(0, 0)
	for _, tt := range []struct {
		name    string
		about   string
		ev      events.Event
		subject string
		ok      bool
	}{
		{"a stop on its node's subject", "j", &events.RunStopped{Hold: events.Hold{Attempt: 1, Node: "a"}, Outcome: events.Succeeded}, "e31.job.j.stopped.a", true},
		{"a stop naming another node than its subject", "j", &events.RunStopped{Hold: events.Hold{Attempt: 1, Node: "a"}, Outcome: events.Succeeded}, "e31.job.j.stopped.b", false},
		{"a stop from before nodes were named", "j", &events.RunStopped{Hold: events.Hold{Attempt: 1, Node: "a"}, Outcome: events.Succeeded}, "e31.job.j.stopped", true},
		{"a start on its node's subject", "j", &events.RunStarted{Hold: events.Hold{Attempt: 1, Node: "a"}}, "e31.job.j.started.a", true},
		{"a start naming another node", "j", &events.RunStarted{Hold: events.Hold{Attempt: 1, Node: "a"}}, "e31.job.j.started.b", false},
		{"a start from before nodes were named", "j", &events.RunStarted{Hold: events.Hold{Attempt: 1, Node: "a"}}, "e31.job.j.started", true},
		{"an announcement of its own node", "a", &events.NodeAnnounced{Node: "a", Boot: "1"}, "e31.node.a.announced", true},
		{"an announcement on its subject naming another node", "b", &events.NodeAnnounced{Node: "a", Boot: "1"}, "e31.node.b.announced", false},
		{"a hold of another node than its subject", "j", &events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "a"}}, "e31.job.j.held.b", false},
	} {
		about := tt.about
		if a, ok := tt.ev.(*events.NodeAnnounced); ok {
			about = a.Node
		}
		m, err := events.New(about, tt.ev, "test", at).Msg()
		if err != nil {
			t.Fatal(err)
		}
		// As a node would publish it by hand: ce-subject is its own name.
		m.Header.Set(events.HeaderSubject, tt.about)
		_, err = events.Decode(tt.subject, m.Header, m.Data)
		if (err == nil) != tt.ok {
			t.Errorf("%s: Decode on %s: %v, want ok %v", tt.name, tt.subject, err, tt.ok)
		}
	}
}

// TestFromHolder checks the one test every reader makes of a node's event
// about an attempt: it acts only if the node the attempt was held on sent
// it; any other event is no node's word.
func TestFromHolder(t *testing.T) {
	t.Parallel()
	stop := &events.RunStopped{Hold: events.Hold{Attempt: 1, Node: "a"}}
	start := &events.RunStarted{Hold: events.Hold{Attempt: 1, Node: "a"}}
	for subject, want := range map[string]bool{"e31.job.j.stopped.a": true, "e31.job.j.started.a": true, "e31.logs.al.j.1.a": true,
		"e31.job.j.stopped": false, "e31.job.j.held.a": false, "e31.node.a.announced": false, "e31.job.j.requested.a": false} {
		if s, err := events.ParseSubject(subject); err != nil || s.NodesWord() != want {
			t.Errorf("ParseSubject(%q).NodesWord() = %v (%v), want %v", subject, s.NodesWord(), err, want)
		}
	}
	if !events.FromHolder(stop, "a") || !events.FromHolder(start, "a") {
		t.Error("the holder's own start and stop are refused")
	}
	if events.FromHolder(stop, "b") || events.FromHolder(start, "b") {
		t.Error("a start or a stop from a node the attempt was not held on is taken")
	}
	if !events.FromHolder(&events.OutputReturned{Hold: events.Hold{Attempt: 1, Node: "a"}}, "b") {
		t.Error("OUTPUT's event is taken for a node's")
	}
	history := []events.Envelope{
		{Event: &events.JobSubmitted{}},
		{Event: &events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "a"}}},
		{Event: &events.ComputeHeld{Hold: events.Hold{Attempt: 2, Node: "b"}}},
	}
	if n, ok := events.HeldOn(history, 2); !ok || n != "b" {
		t.Errorf("HeldOn(2) = %q, %v", n, ok)
	}
	if _, ok := events.HeldOn(history, 3); ok {
		t.Error("HeldOn finds an attempt never held")
	}
	for _, k := range events.NodeKinds() {
		if k != events.TypeNodeAnnounced && !slices.Contains(events.Types(), k) {
			t.Errorf("NodeKinds lists %s, which is no type", k)
		}
	}
}

// IsNodeEvent answers from the type what the subject a decoded event is
// stored on says: NodeAnnounced, NodeExpired and the device events are about a node, every
// other kind about a job. The ledger and OUTPUT's retention leave node
// events out of every job's record by it.
func TestIsNodeEventIsTheSubjectsSpace(t *testing.T) {
	t.Parallel()
	node := map[string]bool{events.TypeNodeAnnounced: true, events.TypeNodeExpired: true, events.TypeDeviceWithdrawn: true, events.TypeDeviceRestored: true}
	for _, typ := range sortedTypes() {
		env, err := events.Decode(goldenSubjects[typ], goldenHeaders(typ), readGolden(t, typ))
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		s, err := events.ParseSubject(env.NATSSubject)
		if err != nil {
			t.Fatal(err)
		}
		if got := events.IsNodeEvent(env.Event); got != node[typ] || got != (s.Space == events.SpaceNode) {
			t.Errorf("IsNodeEvent(%s on %s) = %v", typ, env.NATSSubject, got)
		}
	}
	if events.IsNodeEvent(nil) {
		t.Error("IsNodeEvent(nil) = true")
	}
}
