package audit

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// memberOf submits job as a member of sweep, by who.
func (l *log) memberOf(sweep, job, who string) *log { return l.memberOfRound(sweep, job, who, 0) }

// memberOfRound submits job as a member of sweep submitted again in round.
func (l *log) memberOfRound(sweep, job, who string, round int) *log {
	s := spec
	s.Sweep = &events.SweepPoint{ID: sweep, Index: 0, Count: 1, Again: round}
	return l.add(job, &events.JobRequested{Submitter: who, Spec: s}).add(job, &events.JobSubmitted{Submitter: who, Spec: s})
}

// A member cancelled after its sweep's cancel needs no cancel of its own,
// whether it was submitted before the cancel or after (the sweep was still
// being submitted), and the sweep's cancel is in no record.
func TestASweepsCancelAsksForItsMembersCancels(t *testing.T) {
	t.Parallel()
	l := newLog(t)
	l.memberOf("s", "s-0", "alice").memberOfRound("s", "s-1-a1", "alice", 1).
		add("s", &events.CancelRequested{By: "alice", Sweep: true, Round: 1}).
		memberOf("s", "s-2", "alice").
		add("s-0", &events.JobCancelled{Reason: "cancelled before compute was held"}).
		add("s-1-a1", &events.JobCancelled{Reason: "cancelled before compute was held"}).
		add("s-2", &events.JobCancelled{Reason: "cancelled before compute was held"})
	rep := l.audit(Options{})
	if !rep.OK() {
		t.Fatalf("findings: %+v", rep.Findings)
	}
	if _, ok := rep.Records["s"]; ok || len(rep.Records) != 3 {
		t.Errorf("records %v: want the two members', none for the sweep's id", len(rep.Records))
	}
}

// A sweep's cancel asks only for the members of its round or earlier, and
// only where its sender may cancel them, and only for what comes after it.
func TestASweepsCancelAsksForNoOneElse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		build func(l *log)
	}{
		{"a member of a later round", func(l *log) {
			l.add("s", &events.CancelRequested{By: "alice", Sweep: true}).memberOfRound("s", "s-0", "alice", 1).
				add("s-0", &events.JobCancelled{Reason: "?"})
		}},
		{"a member cancelled before the cancel", func(l *log) {
			l.memberOf("s", "s-0", "alice").add("s-0", &events.JobCancelled{Reason: "?"}).
				add("s", &events.CancelRequested{By: "alice", Sweep: true})
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
