package audit

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/nodecard"
)

// What a compromised node reports, and how the audit tells: the tests
// sign with pkg/nodecard, as RUN does, and the audit checks with its own.

type nodeKeys struct {
	operator, stranger, n1, n2 ed25519.PrivateKey
}

func newNodeKeys(t *testing.T) nodeKeys {
	t.Helper()
	var k nodeKeys
	for _, p := range []*ed25519.PrivateKey{&k.operator, &k.stranger, &k.n1, &k.n2} {
		key, err := nodecard.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		*p = key
	}
	return k
}

func (k nodeKeys) trusted() ed25519.PublicKey { return k.operator.Public().(ed25519.PublicKey) }

// announceCarded announces node with cpu cores and a card of cardCPU
// cores for key, signed by signer (no card if signer is nil), as a new boot
// of it each time.
func (l *log) announceCarded(node string, cpu, cardCPU float64, key, signer ed25519.PrivateKey) *log {
	boots := 1
	for _, r := range l.raws {
		if r.Subject == "e31.node."+node+".announced" {
			boots++
		}
	}
	a := &events.NodeAnnounced{Node: node, Boot: fmt.Sprintf("b%d", boots), CPU: cpu, MemoryBytes: 4 << 30, DiskBytes: 8 << 30}
	if signer != nil {
		c := nodecard.Issue(signer, events.NodeCard{Node: node, CPU: cardCPU, MemoryBytes: 4 << 30, DiskBytes: 8 << 30, Key: nodecard.PublicOf(key)}, t0)
		a.Card = &c
	}
	return l.add(node, a)
}

// signedLife is one attempt of job on h.Node, its stop made by stop and
// signed with key (unsigned if key is nil), released 2 s after its hold.
func (l *log) signedLife(job string, h events.Hold, key ed25519.PrivateKey, usage events.Usage) *log {
	zero := 0
	stop := &events.RunStopped{Hold: h, Outcome: events.Succeeded, ExitCode: &zero, Usage: usage,
		Output: events.Collected{Files: []events.OutputFile{{Path: "out.txt", Bytes: 2, Digest: "sha256:" + strings.Repeat("ab", 32)}}, Missing: []string{}, Bytes: 2}}
	if key != nil {
		nodecard.SignStop(key, job, stop)
	}
	l.add(job, &events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec}).
		add(job, &events.RunStarted{Hold: h, Isolation: events.IsolationSandbox})
	l.at += 1600 * time.Millisecond
	return l.add(job, stop).
		add(job, &events.OutputReturned{Hold: h, Outcome: events.Succeeded, Files: stop.Output.Files, Bytes: 2, Missing: []string{}}).
		add(job, &events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true})
}

// tamper changes field of the stored RunStopped of job, as someone with
// write access to the stored log (or a forger) would.
func (l *log) tamper(t *testing.T, job string, change func(map[string]any)) {
	t.Helper()
	for i, r := range l.raws {
		if subj, err := events.ParseSubject(r.Subject); err != nil || subj.Job != job || r.Headers.Get(events.HeaderType) != events.TypeRunStopped {
			continue
		}
		var body map[string]any
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		change(body)
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		l.raws[i].Body = b
		return
	}
	t.Fatalf("no stop of %s", job)
}

// findingsOf lists "kind: detail" of every finding.
func findingsOf(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Kind+": "+f.Detail)
	}
	return out
}

func TestAuditChecksEachStopAgainstItsNodesCard(t *testing.T) {
	t.Parallel()
	k := newNodeKeys(t)
	h1 := holdOf("n1", 1, 1)
	tests := []struct {
		name   string
		build  func(l *log)
		key    bool   // the auditor has the operator's card key
		want   string // in the one finding; "" for none
		counts [2]int // stops verified, unchecked
	}{
		{name: "a stop signed by its node's key passes", key: true, counts: [2]int{1, 0},
			build: func(l *log) {
				l.announceCarded("n1", 2, 2, k.n1, k.operator).submitted("j").signedLife("j", h1, k.n1, events.Usage{})
			}},
		{name: "a stop whose cpu_seconds was changed after it was signed", key: true,
			build: func(l *log) {
				l.announceCarded("n1", 2, 2, k.n1, k.operator).submitted("j").signedLife("j", h1, k.n1, events.Usage{CPUSeconds: 1})
				l.tamper(t, "j", func(b map[string]any) { b["usage"].(map[string]any)["cpu_seconds"] = 0.5 })
			}, want: "does not verify with the node's key"},
		{name: "a stop whose output digest was changed after it was signed", key: true,
			build: func(l *log) {
				l.announceCarded("n1", 2, 2, k.n1, k.operator).submitted("j").signedLife("j", h1, k.n1, events.Usage{})
				l.tamper(t, "j", func(b map[string]any) {
					b["output"].(map[string]any)["files"].([]any)[0].(map[string]any)["digest"] = "sha256:" + strings.Repeat("00", 32)
				})
			}, want: "does not verify with the node's key"},
		{name: "a stop signed with the key the node announced after the hold, as a node that restarted does", key: true, counts: [2]int{1, 0},
			build: func(l *log) {
				l.announceCarded("n1", 2, 2, k.n1, k.operator).submitted("j")
				zero := 0
				stop := &events.RunStopped{Hold: h1, Outcome: events.NodeLost, ExitCode: &zero, Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}}}
				nodecard.SignStop(k.n2, "j", stop)
				l.add("j", &events.ComputeHeld{Hold: h1, Submitter: "alice", Spec: spec}).
					announceCarded("n1", 2, 2, k.n2, k.operator).
					add("j", stop).
					add("j", &events.OutputReturned{Hold: h1, Outcome: events.NodeLost, Files: []events.OutputFile{}, Missing: []string{}}).
					add("j", &events.ComputeReleased{Hold: h1, Outcome: events.NodeLost, Final: true})
			}},
		{name: "a stop signed by another node's key", key: true,
			build: func(l *log) {
				l.announceCarded("n1", 2, 2, k.n1, k.operator).announceCarded("n2", 2, 2, k.n2, k.operator).
					submitted("j").signedLife("j", h1, k.n2, events.Usage{})
			}, want: "not with the key of the node's card"},
		{name: "an unsigned stop from a node with a card", key: true,
			build: func(l *log) {
				l.announceCarded("n1", 2, 2, k.n1, k.operator).submitted("j").signedLife("j", h1, nil, events.Usage{})
			},
			want: "is unsigned, but the node presented a card"},
		{name: "an unsigned stop from a node without a card, as before cards", key: true, counts: [2]int{0, 1},
			build: func(l *log) {
				l.announceCarded("n1", 2, 2, nil, nil).submitted("j").signedLife("j", h1, nil, events.Usage{})
			}},
		{name: "a card a stranger signed binds no key", key: true, counts: [2]int{0, 1},
			build: func(l *log) {
				l.announceCarded("n1", 2, 2, k.n1, k.stranger).submitted("j").signedLife("j", h1, k.n1, events.Usage{})
			},
			want: "not by the operator's card key"},
		{name: "without the operator's key, a card is taken as it comes", counts: [2]int{1, 0},
			build: func(l *log) {
				l.announceCarded("n1", 2, 2, k.n1, k.stranger).submitted("j").signedLife("j", h1, k.n1, events.Usage{})
			}},
		{name: "a node held beyond its card's capacity", key: true, counts: [2]int{1, 0},
			build: func(l *log) {
				l.announceCarded("n1", 8, 2, k.n1, k.operator).submitted("j").signedLife("j", holdOf("n1", 1, 4), k.n1, events.Usage{})
			}, want: "held beyond its capacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := &log{t: t}
			tt.build(l)
			opts := Options{}
			if tt.key {
				opts.CardsKey = k.trusted()
			}
			rep := l.audit(opts)
			got := findingsOf(rep)
			switch {
			case tt.want == "" && len(got) != 0:
				t.Errorf("findings %q, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Errorf("findings %q, want one that says %q", got, tt.want)
			}
			if c := [2]int{rep.StopsVerified, rep.StopsUnchecked}; c != tt.counts && tt.want == "" {
				t.Errorf("stops verified, unchecked: %v, want %v", c, tt.counts)
			}
			if (rep.CardsKey != "") != tt.key {
				t.Errorf("the report's cards key %q", rep.CardsKey)
			}
			if r := rep.Records["j"]; r != nil && tt.want == "" && len(r.Attempts) == 1 {
				stop := l.raws[len(l.raws)-3]
				var s events.RunStopped
				_ = json.Unmarshal(stop.Body, &s)
				if r.Attempts[0].Signature != s.Signature || r.Attempts[0].SigningKey != s.SigningKey {
					t.Errorf("the record's signature %q %q, the stop's %q %q", r.Attempts[0].Signature, r.Attempts[0].SigningKey, s.Signature, s.SigningKey)
				}
			}
		})
	}
}

// TestAuditFlagsUsageBeyondTheHold: a node reporting more cpu time than
// its hold's cores for as long as held, or more memory than held, is a
// finding, named in the record's flags as the ledger names it.
func TestAuditFlagsUsageBeyondTheHold(t *testing.T) {
	t.Parallel()
	l := &log{t: t}
	l.announceCarded("n1", 2, 2, nil, nil).submitted("j").signedLife("j", holdOf("n1", 1, 1), nil, events.Usage{CPUSeconds: 86400, MaxRSSBytes: 2 << 30})
	rep := l.audit(Options{})
	var usage []string
	for _, f := range rep.Findings {
		if f.Kind == UsageBeyondHold {
			usage = append(usage, f.Detail)
		}
	}
	if len(usage) != 2 || len(rep.Findings) != 2 || !strings.Contains(usage[0], "cpu_seconds 86400 > 1 cpu × 2 s held") ||
		!strings.Contains(usage[1], "max_rss_bytes 2147483648 > 1073741824 bytes held") {
		t.Errorf("findings %q, want the cpu and the memory beyond the hold", findingsOf(rep))
	}
	want := []string{"attempt 1: usage_beyond_hold: cpu_seconds 86400 > 1 cpu × 2 s held",
		"attempt 1: usage_beyond_hold: max_rss_bytes 2147483648 > 1073741824 bytes held"}
	if r := rep.Records["j"]; !slices.Equal(r.Flags, want) {
		t.Errorf("record flags %q, want %q", r.Flags, want)
	}
}

// TestAuditKeepsRENTsEndOverALateStop: an attempt RENT ended at its limit
// plus grace is released as limit_exceeded; a stop its node reports after
// changes nothing in the record, and is a finding while the job lives.
// Once the job is over, a node's word about it is set aside like any
// node's (a node may publish on its own subjects at any time, and must
// not be able to fill an audit with findings about jobs long over).
func TestAuditKeepsRENTsEndOverALateStop(t *testing.T) {
	t.Parallel()
	for _, beforeRelease := range []bool{true, false} {
		l := newLog(t).submitted("j")
		h := holdOf("n1", 1, 1)
		zero := 0
		late := &events.RunStopped{Hold: h, Outcome: events.Succeeded, ExitCode: &zero, Usage: events.Usage{CPUSeconds: 86400}}
		l.add("j", &events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec}).add("j", &events.RunStarted{Hold: h}).
			add("j", &events.HoldExpired{Hold: h, Deadline: t0, Reason: "node n1 had not reported"})
		if beforeRelease {
			l.add("j", late)
		}
		l.add("j", &events.ComputeReleased{Hold: h, Outcome: events.LimitExceeded, Final: true})
		if !beforeRelease {
			l.add("j", late)
		}
		rep := l.audit(Options{})
		got := findingsOf(rep)
		switch {
		case beforeRelease && (len(got) != 1 || !strings.HasPrefix(got[0], Order+": RunStopped")):
			t.Errorf("late stop before the release: findings %q, want the late stop's order", got)
		case !beforeRelease && (len(got) != 0 || rep.SetAside != 1):
			t.Errorf("late stop after the release: findings %q, %d set aside; want none, and it set aside", got, rep.SetAside)
		}
		r := rep.Records["j"]
		a := r.Attempts[0]
		if r.State != hold.StateReleased || r.Outcome != events.LimitExceeded || a.ExpiredAt == nil || a.StoppedAt != nil || a.Usage.CPUSeconds != 0 || len(r.Flags) != 0 {
			t.Errorf("late stop before the release %v: record %s %s, attempt %+v, flags %q", beforeRelease, r.State, r.Outcome, a, r.Flags)
		}
	}
}
