package audit

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// memberOf submits job as a member of sweep, by who.
func (l *log) memberOf(sweep, job, who string) *log {
	s := spec
	s.Sweep = &events.SweepPoint{ID: sweep, Index: 0, Count: 1}
	return l.add(job, &events.JobRequested{Submitter: who, Spec: s}).add(job, &events.JobSubmitted{Submitter: who, Spec: s})
}

// A member cancelled after its sweep's cancel needs no cancel of its own,
// and the sweep's cancel is in no record.
func TestASweepsCancelAsksForItsMembersCancels(t *testing.T) {
	t.Parallel()
	l := newLog(t)
	l.memberOf("s", "s-0", "alice").memberOf("s", "s-1", "alice").
		add("s", &events.CancelRequested{By: "alice", Sweep: true}).
		add("s-0", &events.JobCancelled{Reason: "cancelled before compute was held"}).
		add("s-1", &events.JobCancelled{Reason: "cancelled before compute was held"})
	rep := l.audit(Options{})
	if !rep.OK() {
		t.Fatalf("findings: %+v", rep.Findings)
	}
	if _, ok := rep.Records["s"]; ok || len(rep.Records) != 2 {
		t.Errorf("records %v: want the two members', none for the sweep's id", len(rep.Records))
	}
}

// A sweep's cancel asks only for the members submitted before it, and
// only where its sender may cancel them.
func TestASweepsCancelAsksForNoOneElse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		build func(l *log)
	}{
		{"a member submitted after the cancel", func(l *log) {
			l.add("s", &events.CancelRequested{By: "alice", Sweep: true}).memberOf("s", "s-0", "alice").
				add("s-0", &events.JobCancelled{Reason: "?"})
		}},
		{"a member of another tenant", func(l *log) {
			l.memberOf("s", "s-0", "alice").add("s", &events.CancelRequested{By: "bob", Sweep: true}).
				add("s-0", &events.JobCancelled{Reason: "?"})
		}},
		{"a member of another sweep", func(l *log) {
			l.memberOf("s", "s-0", "alice").add("t", &events.CancelRequested{By: "alice", Sweep: true}).
				add("s-0", &events.JobCancelled{Reason: "?"})
		}},
		{"a job's plain cancel on the sweep's id", func(l *log) {
			l.memberOf("s", "s-0", "alice").add("s", &events.CancelRequested{By: "alice"}).
				add("s-0", &events.JobCancelled{Reason: "?"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLog(t)
			tt.build(l)
			rep := l.audit(Options{})
			for _, f := range rep.Findings {
				if f.Kind == Order && f.Job == "s-0" {
					return
				}
			}
			t.Errorf("want an order finding about s-0 cancelled unasked; got %+v", rep.Findings)
		})
	}
}
