package ledger_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// oneAttempt is a job held on n1 at 1s with 1 cpu and 512 MiB, started
// under isolation iso at 1.25s, stopped at 20s with usage u, its output
// returned and released at 22s: 21 s held.
func oneAttempt(iso events.Isolation, u events.Usage, signed bool) *history {
	var h history
	zero := 0
	spec := specOf("usage")
	hold := holdOn("n1", 1)
	stop := &events.RunStopped{Hold: hold, Outcome: events.Succeeded, ExitCode: &zero, Usage: u,
		Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}}}
	if signed {
		stop.Signature, stop.SigningKey = strings.Repeat("D", 86)+"==", "ed25519:"+strings.Repeat("C", 43)+"="
	}
	h.add("job-1", at("0s"), &events.JobSubmitted{Submitter: "alice", Spec: spec})
	h.add("job-1", at("1s"), &events.ComputeHeld{Hold: hold, Submitter: "alice", Spec: spec})
	h.add("job-1", at("1.25s"), &events.RunStarted{Hold: hold, Isolation: iso})
	h.add("job-1", at("20s"), stop)
	h.add("job-1", at("21s"), &events.OutputReturned{Hold: hold, Outcome: events.Succeeded, Files: []events.OutputFile{}, Missing: []string{}})
	h.add("job-1", at("22s"), &events.ComputeReleased{Hold: hold, Outcome: events.Succeeded, Final: true})
	return &h
}

// TestProjectionFlagsUsageBeyondTheHold: usage a node reports that the
// hold could not contain is flagged on the attempt and the record, once
// the attempt is released (its held time known); usage within it, and
// that of an attempt run without isolation, is not.
func TestProjectionFlagsUsageBeyondTheHold(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		iso  events.Isolation
		u    events.Usage
		want []string
	}{
		{"within the hold", events.IsolationSandbox, events.Usage{CPUSeconds: 21, MaxRSSBytes: 512 << 20}, nil},
		{"within the slack", events.IsolationSandbox, events.Usage{CPUSeconds: 21*1.05 + 1, MaxRSSBytes: 513 << 20}, nil},
		{"a day of cpu in 21 s", events.IsolationSandbox, events.Usage{CPUSeconds: 86400},
			[]string{"attempt 1: usage_beyond_hold: cpu_seconds 86400 > 1 cpu × 21 s held"}},
		{"more memory than held", events.IsolationContainer, events.Usage{MaxRSSBytes: 1 << 30},
			[]string{"attempt 1: usage_beyond_hold: max_rss_bytes 1073741824 > 536870912 bytes held"}},
		{"both", "", events.Usage{CPUSeconds: 100, MaxRSSBytes: 1 << 30}, []string{
			"attempt 1: usage_beyond_hold: cpu_seconds 100 > 1 cpu × 21 s held",
			"attempt 1: usage_beyond_hold: max_rss_bytes 1073741824 > 536870912 bytes held"}},
		{"without isolation nothing held it: not judged", events.IsolationNone, events.Usage{CPUSeconds: 86400, MaxRSSBytes: 1 << 40}, nil},
	} {
		h := oneAttempt(tt.iso, tt.u, false)
		before := project(t, h.envs[:len(h.envs)-1]).Record("job-1")
		if len(before.Flags) != 0 {
			t.Errorf("%s: flagged before the release: %q", tt.name, before.Flags)
		}
		r := project(t, h.envs).Record("job-1")
		if !slices.Equal(r.Flags, tt.want) {
			t.Errorf("%s: flags %q, want %q", tt.name, r.Flags, tt.want)
		}
		if len(r.Attempts[0].Flags) != len(tt.want) {
			t.Errorf("%s: the attempt's flags %q", tt.name, r.Attempts[0].Flags)
		}
	}
}

// TestProjectionCarriesTheStopsSignature: the record shows the node's
// signature of each attempt's stop, for the audit to check.
func TestProjectionCarriesTheStopsSignature(t *testing.T) {
	t.Parallel()
	a := project(t, oneAttempt(events.IsolationSandbox, events.Usage{}, true).envs).Record("job-1").Attempts[0]
	if a.Signature != strings.Repeat("D", 86)+"==" || a.SigningKey != "ed25519:"+strings.Repeat("C", 43)+"=" {
		t.Errorf("attempt %+v, want the stop's signature and key", a)
	}
	if a := project(t, oneAttempt(events.IsolationSandbox, events.Usage{}, false).envs).Record("job-1").Attempts[0]; a.Signature != "" || a.SigningKey != "" {
		t.Errorf("an unsigned stop: %+v", a)
	}
}

// TestProjectionKeepsRENTsEndOverALateStop: an attempt RENT ended at its
// limit plus grace is limit_exceeded, released at once; the stop its node
// reports later, before the release or after, is listed and changes
// nothing.
func TestProjectionKeepsRENTsEndOverALateStop(t *testing.T) {
	t.Parallel()
	for _, beforeRelease := range []bool{true, false} {
		var h history
		zero := 0
		spec := specOf("quiet")
		hd := holdOn("n1", 1)
		h.add("job-1", at("0s"), &events.JobSubmitted{Submitter: "alice", Spec: spec})
		h.add("job-1", at("1s"), &events.ComputeHeld{Hold: hd, Submitter: "alice", Spec: spec})
		h.add("job-1", at("1.25s"), &events.RunStarted{Hold: hd, Isolation: events.IsolationSandbox})
		h.add("job-1", at("661s"), &events.HoldExpired{Hold: hd, Deadline: at("661s"), Reason: "node n1 had not reported"})
		late := &events.RunStopped{Hold: hd, Outcome: events.Succeeded, ExitCode: &zero, Usage: events.Usage{CPUSeconds: 86400},
			Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}}}
		if beforeRelease {
			h.add("job-1", at("661.5s"), late)
		}
		h.add("job-1", at("662s"), &events.ComputeReleased{Hold: hd, Outcome: events.LimitExceeded, Final: true})
		if !beforeRelease {
			h.add("job-1", at("700s"), late)
		}
		r := project(t, h.envs).Record("job-1")
		a := r.Attempts[0]
		if r.State != hold.StateReleased || r.Outcome != events.LimitExceeded || a.Outcome != events.LimitExceeded ||
			a.ExpiredAt == nil || !a.ExpiredAt.Equal(at("661s")) || a.StoppedAt != nil || a.ExitCode != nil || a.Usage.CPUSeconds != 0 ||
			a.HeldSeconds != 661 || !strings.Contains(r.Reason, "had not reported") {
			t.Errorf("late stop before the release %v: record %s %s (%q), attempt %+v; want released, limit_exceeded, expired at 661s, held 661 s, no stop",
				beforeRelease, r.State, r.Outcome, r.Reason, a)
		}
		if n := len(r.Events); n != len(h.envs) || r.Events[n-1].Seq != uint64(len(h.envs)) && !beforeRelease {
			t.Errorf("the late stop is not listed: %+v", r.Events)
		}
		if len(r.Flags) != 0 {
			t.Errorf("flags %q: a stop set aside is not judged", r.Flags)
		}
	}
}
