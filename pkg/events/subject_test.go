package events_test

import (
	"errors"
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
		{"e31.job.j-1.requested.alice", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "requested", Identity: "alice"}},
		{"e31.job.j-1.cancel.operator", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "cancel", Identity: "operator"}},
		{"e31.job.j-1.delete.bob", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "delete", Identity: "bob"}},
		{"e31.job.j-1.some_new_kind", events.Subject{Space: events.SpaceJob, Job: "j-1", Kind: "some_new_kind"}},
		{"e31.node.n1.announced", events.Subject{Space: events.SpaceNode, Node: "n1", Kind: "announced"}},
		{"e31.logs.alice.j-1.2", events.Subject{Space: events.SpaceLogs, Identity: "alice", Job: "j-1", Attempt: 2}},
		{"e31.timer.at.expire.j-1", events.Subject{Space: events.SpaceTimer, Kind: "expire", Job: "j-1"}},
		{"e31.timer.due.sweep.j-1", events.Subject{Space: events.SpaceTimer, Kind: "sweep", Job: "j-1", Due: true}},
		{"e31.poison.rent", events.Subject{Space: events.SpacePoison, Service: "rent"}},
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
		"e31.job.j.held",              // a hold names its node
		"e31.job.j.requested",         // a request names its submitter
		"e31.job.j.submitted.extra",   // only some kinds carry one more token
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
		"e31.timer.soon.expire.j",
		"e31.timer.at.expire",
		"e31.poison",
		"e31.poison.rent.x",
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
		{&events.RunStopped{}, events.Subject{Space: events.SpaceJob, Job: "x", Kind: "stopped"}},
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
	if got := events.LogSubject("alice", "j", 3); got != "e31.logs.alice.j.3" {
		t.Errorf("LogSubject = %q", got)
	}
	if got := events.KindSubject(events.TypeComputeHeld); got != "e31.job.*.held.*" {
		t.Errorf("KindSubject(held) = %q", got)
	}
	if got := events.KindSubject(events.TypeRunStopped); got != "e31.job.*.stopped" {
		t.Errorf("KindSubject(stopped) = %q", got)
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
		"e31.job.j-1.submitted", "e31.job.j.held.n1", "e31.job.j.requested.alice", "e31.job.j.cancel.bob",
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
