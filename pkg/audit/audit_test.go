package audit

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// The worked example of chain.Version, the same the ledger's tests
// check: computed apart from either implementation, with Python's hashlib.
var vector = Raw{
	Seq:     7,
	Subject: "e31.job.vec-1.submitted",
	Headers: nats.Header{
		"ce-specversion": {"1.0"}, "ce-id": {"vec-1/submitted"}, "ce-type": {"e31.job.submitted.v1"},
		"ce-source": {"e31/submit/host-1"}, "ce-time": {"2026-12-02T12:00:00.1Z"}, "ce-subject": {"vec-1"},
		"content-type": {"application/json"}, "Nats-Msg-Id": {"vec-1/submitted"},
	},
	Body: []byte(`{"submitter":"alice","spec":{"work":{"command":["/bin/true"]},"request":{"cpu":1,"memory_bytes":536870912,"gpu":0,"disk_bytes":1073741824,"limit_seconds":600}}}`),
}

func TestDigestIsTheWrittenDefinition(t *testing.T) {
	t.Parallel()
	d := Digest(vector)
	if got := digestText(d[:]); got != "sha256:f7f79dfc907535a225b8efe508f63972d9b2b8e038f7412667a99ec4327aca25" {
		t.Errorf("digest = %s", got)
	}
	var c HashChain
	c.Add(vector.Seq, d)
	if got := c.Head().String(); got != "7:19471283aec3247aeaf4cf3f61dbade6cb97c4bc904a822653eb17c6ce3cabd9" {
		t.Errorf("head = %s", got)
	}
}

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// log builds a stream of stored messages, as the server would store them.
type log struct {
	t    testing.TB
	raws []Raw
	at   time.Duration
}

func (l *log) add(subject string, ev events.Event) *log {
	l.t.Helper()
	l.at += 100 * time.Millisecond
	m, err := events.New(subject, ev, "e31/test", t0.Add(l.at)).Msg()
	if err != nil {
		l.t.Fatal(err)
	}
	l.raws = append(l.raws, Raw{Seq: uint64(len(l.raws) + 1), Subject: m.Subject, Headers: m.Header, Body: m.Data})
	return l
}

func (l *log) audit(opts Options) *Report {
	a := New(opts)
	for _, r := range l.raws {
		a.Add(r)
	}
	return a.Finish()
}

var spec = events.JobSpec{Name: "t", Work: events.Work{Command: []string{"/bin/true"}},
	Request: events.Request{CPU: 1, MemoryBytes: 1 << 30, DiskBytes: 1 << 30, LimitSeconds: 60}}

func holdOf(node string, attempt int, cpu float64) events.Hold {
	return events.Hold{Attempt: attempt, Node: node, CPU: cpu, MemoryBytes: 1 << 30, DiskBytes: 1 << 30}
}

// life appends the events of one attempt, from hold to release.
func (l *log) life(job string, h events.Hold, final bool) *log {
	zero := 0
	return l.add(job, &events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec}).
		add(job, &events.RunStarted{Hold: h}).
		add(job, &events.RunStopped{Hold: h, Outcome: events.Succeeded, ExitCode: &zero}).
		add(job, &events.OutputReturned{Hold: h, Outcome: events.Succeeded, Files: []events.OutputFile{}, Missing: []string{}}).
		add(job, &events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: final})
}

func newLog(t *testing.T) *log {
	l := &log{t: t}
	return l.add("n1", &events.NodeAnnounced{Node: "n1", Boot: "b1", CPU: 2, MemoryBytes: 4 << 30, GPU: 1, DiskBytes: 8 << 30})
}

func (l *log) submitted(job string) *log {
	return l.add(job, &events.JobRequested{Submitter: "alice", Spec: spec}).add(job, &events.JobSubmitted{Submitter: "alice", Spec: spec})
}

// kinds lists "kind job #seq" of every finding.
func kinds(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Kind+" "+f.Job)
	}
	return out
}

func TestLegalLivesPass(t *testing.T) {
	t.Parallel()
	l := newLog(t)
	l.submitted("ok").life("ok", holdOf("n1", 1, 1), true)
	l.submitted("lost")
	h1 := holdOf("n1", 1, 1)
	l.add("lost", &events.ComputeHeld{Hold: h1, Submitter: "alice", Spec: spec}).
		add("lost", &events.RunStarted{Hold: h1}).
		add("lost", &events.HoldLost{Hold: h1, Reason: "lease expired"}).
		add("lost", &events.ComputeReleased{Hold: h1, Outcome: events.NodeLost}).
		life("lost", holdOf("n1", 2, 1), true)
	l.add("rej", &events.JobRequested{Submitter: "bob", Spec: spec}).add("rej", &events.JobRejected{Reason: "no"})
	l.submitted("cxl").add("cxl", &events.CancelRequested{By: "alice"}).add("cxl", &events.JobCancelled{Reason: "asked"})
	l.submitted("cxl-run")
	h := holdOf("n1", 1, 1)
	l.add("cxl-run", &events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec}).
		add("cxl-run", &events.CancelRequested{By: "alice"}).
		add("cxl-run", &events.RunStopped{Hold: h, Outcome: events.Cancelled}).
		add("cxl-run", &events.OutputReturned{Hold: h, Outcome: events.Cancelled, Partial: true}).
		add("cxl-run", &events.ComputeReleased{Hold: h, Outcome: events.Cancelled, Final: true}).
		add("cxl-run", &events.DeleteRequested{What: events.WhatAll, By: "alice"}).
		add("cxl-run", &events.Deleted{What: events.WhatOutput, Cause: events.CauseRequested}).
		add("cxl-run", &events.CancelRequested{By: "alice"}) // asking again, after the end: no fault
	l.submitted("running").add("running", &events.ComputeHeld{Hold: holdOf("n1", 1, 1), Submitter: "alice", Spec: spec})
	rep := l.audit(Options{})
	if !rep.OK() {
		t.Fatalf("findings on a legal log: %+v", rep.Findings)
	}
	r := rep.Records["lost"]
	if len(r.Attempts) != 2 || r.Attempts[0].Outcome != events.NodeLost || r.Outcome != events.Succeeded || r.HeldSeconds <= 0 {
		t.Errorf("record of a job held twice: %+v", r)
	}
	if r.CPUCoreSeconds != r.HeldSeconds || r.MemoryGiBSeconds != r.HeldSeconds || r.GPUSeconds != 0 {
		t.Errorf("meter of 1 cpu and 1 GiB: %v core-s, %v GiB-s for %v s", r.CPUCoreSeconds, r.MemoryGiBSeconds, r.HeldSeconds)
	}
}

// TestIllegalLivesAreNamed: each broken history gives a finding of the
// right kind, naming the job.
func TestIllegalLivesAreNamed(t *testing.T) {
	t.Parallel()
	h := holdOf("n1", 1, 1)
	tests := []struct {
		name  string
		build func(l *log)
		want  string // kind, and a word of the detail
	}{
		{"returned before held", func(l *log) {
			l.submitted("j").add("j", &events.OutputReturned{Hold: h, Outcome: events.Succeeded, Files: []events.OutputFile{}, Missing: []string{}})
		}, "order j never held"},
		{"submitted without a request", func(l *log) {
			l.add("j", &events.JobSubmitted{Submitter: "a", Spec: spec})
		}, "order j not been requested"},
		{"held before submitted", func(l *log) {
			l.add("j", &events.JobRequested{Submitter: "a", Spec: spec}).add("j", &events.ComputeHeld{Hold: h, Spec: spec})
		}, "order j held while"},
		{"returned before stopped", func(l *log) {
			l.submitted("j").add("j", &events.ComputeHeld{Hold: h, Spec: spec}).add("j", &events.RunStarted{Hold: h}).
				add("j", &events.OutputReturned{Hold: h, Outcome: events.Succeeded})
		}, "order j which was started"},
		{"released without a return", func(l *log) {
			l.submitted("j").add("j", &events.ComputeHeld{Hold: h, Spec: spec}).add("j", &events.RunStarted{Hold: h}).
				add("j", &events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true})
		}, "order j which was started"},
		{"attempt 3 after attempt 1", func(l *log) {
			l.submitted("j").add("j", &events.ComputeHeld{Hold: h, Spec: spec}).add("j", &events.HoldLost{Hold: h}).
				add("j", &events.ComputeReleased{Hold: h, Outcome: events.NodeLost}).
				add("j", &events.ComputeHeld{Hold: holdOf("n1", 3, 1), Spec: spec})
		}, "order j after attempt 1"},
		{"something after the end", func(l *log) {
			l.submitted("j").life("j", h, true).add("j", &events.ComputeHeld{Hold: holdOf("n1", 2, 1), Spec: spec})
		}, "order j after the job ended"},
		{"cancelled unasked", func(l *log) {
			l.submitted("j").add("j", &events.JobCancelled{Reason: "?"})
		}, "order j nobody asked"},
		{"rejected while held", func(l *log) {
			l.submitted("j").add("j", &events.ComputeHeld{Hold: h, Spec: spec}).add("j", &events.JobRejected{Reason: "?"})
		}, "order j was held"},
		{"held and over, never released", func(l *log) {
			l.submitted("j").add("j", &events.ComputeHeld{Hold: h, Spec: spec}).add("j", &events.RunStopped{Hold: h, Outcome: events.Failed}).
				add("j", &events.OutputReturned{Hold: h, Outcome: events.Failed}).
				add("j", &events.CancelRequested{By: "alice"}).add("j", &events.JobCancelled{Reason: "x"})
		}, "unreleased j never released"},
		{"a release that names another node", func(l *log) {
			l.submitted("j").add("j", &events.ComputeHeld{Hold: h, Spec: spec}).add("j", &events.HoldLost{Hold: holdOf("n2", 1, 1)})
		}, "inconsistent j held on n1"},
		{"a service's event stored twice", func(l *log) {
			l.submitted("j").add("j", &events.ComputeHeld{Hold: h, Spec: spec}).add("j", &events.ComputeHeld{Hold: h, Spec: spec})
		}, "duplicate j already stored"},
		{"a hold on a node that never announced itself", func(l *log) {
			l.submitted("j").add("j", &events.ComputeHeld{Hold: holdOf("n9", 1, 1), Spec: spec})
		}, "capacity j never announced"},
		{"a hold on an expired node", func(l *log) {
			l.add("n1", &events.NodeExpired{Node: "n1", Boot: "b1", Reason: "lease"}).submitted("j").add("j", &events.ComputeHeld{Hold: h, Spec: spec})
		}, "capacity j expired"},
		{"a hold after an old boot expired is fine, but not after the current one did", func(l *log) {
			l.add("n1", &events.NodeAnnounced{Node: "n1", Boot: "b2", CPU: 2, MemoryBytes: 4 << 30, GPU: 1, DiskBytes: 8 << 30}).
				add("n1", &events.NodeExpired{Node: "n1", Boot: "b1", Reason: "late"}).
				submitted("j").add("j", &events.ComputeHeld{Hold: h, Spec: spec}).
				add("n1", &events.NodeExpired{Node: "n1", Boot: "b2", Reason: "lease"}).
				submitted("k").add("k", &events.ComputeHeld{Hold: h, Spec: spec})
		}, "capacity k expired"},
		{"gpu beyond the node's", func(l *log) {
			g := h
			g.GPU = 2
			l.submitted("j").add("j", &events.ComputeHeld{Hold: g, Spec: spec})
		}, "capacity j 2 of 1 gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLog(t)
			tt.build(l)
			rep := l.audit(Options{})
			words := strings.SplitN(tt.want, " ", 3)
			for _, f := range rep.Findings {
				if f.Kind == words[0] && f.Job == words[1] && strings.Contains(f.Detail, words[2]) && f.Seq > 0 {
					return
				}
			}
			t.Errorf("want a %s finding about %s saying %q with its sequence; got %+v", words[0], words[1], words[2], rep.Findings)
		})
	}
}

// TestOverlappingHoldsBeyondCapacity: two jobs held on one node at once,
// each fitting alone, together beyond its cpu.
func TestOverlappingHoldsBeyondCapacity(t *testing.T) {
	t.Parallel()
	l := newLog(t)
	l.submitted("a").submitted("b")
	l.add("a", &events.ComputeHeld{Hold: holdOf("n1", 1, 1.5), Spec: spec})
	l.add("b", &events.ComputeHeld{Hold: holdOf("n1", 1, 1), Spec: spec})
	seq := uint64(len(l.raws))
	rep := l.audit(Options{})
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != Capacity || rep.Findings[0].Job != "b" || rep.Findings[0].Seq != seq ||
		!strings.Contains(rep.Findings[0].Detail, "2.5 of 2 cpu") {
		t.Fatalf("findings = %+v, want one capacity finding for b at #%d, 2.5 of 2 cpu", rep.Findings, seq)
	}
	// One after the other, they fit.
	l = newLog(t)
	l.submitted("a").submitted("b").life("a", holdOf("n1", 1, 1.5), true).life("b", holdOf("n1", 1, 1), true)
	if rep := l.audit(Options{}); !rep.OK() {
		t.Errorf("holds one after the other: %+v", rep.Findings)
	}
}

// TestTamperingWithTheLog: deleting, duplicating, moving or changing one
// message of a copy is found and named.
func TestTamperingWithTheLog(t *testing.T) {
	t.Parallel()
	l := newLog(t)
	l.submitted("a").life("a", holdOf("n1", 1, 1), true).submitted("b").life("b", holdOf("n1", 1, 1), true)
	clean := l.audit(Options{})
	if !clean.OK() {
		t.Fatalf("clean log: %+v", clean.Findings)
	}
	var head chain.Head // the chain's head at the 10th message
	{
		var c HashChain
		for _, r := range l.raws[:10] {
			c.Add(r.Seq, Digest(r))
		}
		head = c.Head()
	}
	// auditWith audits raws and compares the records rebuilt with recs;
	// audit, with the clean log's.
	auditWith := func(recs []*hold.HoldRecord, raws []Raw, heads ...chain.Head) *Report {
		a := New(Options{Heads: heads})
		for _, r := range raws {
			a.Add(r)
		}
		rep := a.Finish()
		rep.Compare(recs, true)
		return rep
	}
	audit := func(raws []Raw, heads ...chain.Head) *Report {
		return auditWith(recordsOf(clean), raws, heads...)
	}
	has := func(rep *Report, kind string, seq uint64, words string) bool {
		for _, f := range rep.Findings {
			if f.Kind == kind && f.Seq == seq && strings.Contains(f.Detail, words) {
				return true
			}
		}
		t.Errorf("want a %s finding at #%d saying %q; got %+v", kind, seq, words, rep.Findings)
		return false
	}

	// Deleted: message 5 (a's RunStarted).
	del := append(append([]Raw(nil), l.raws[:4]...), l.raws[5:]...)
	rep := audit(del, head)
	has(rep, Gap, 5, "#5 is missing")
	has(rep, Chain, 10, "does not pass through")
	has(rep, Mismatch, 5, "the log does not have")

	// Duplicated: message 6 stored twice in the copy.
	dup := append(append(append([]Raw(nil), l.raws[:6]...), l.raws[5]), l.raws[6:]...)
	rep = audit(dup, head)
	has(rep, Duplicate, 6, "appears twice")

	// Changed: a's RunStopped says exit 3 instead of 0.
	changed := append([]Raw(nil), l.raws...)
	m := changed[5]
	m.Body = []byte(strings.Replace(string(m.Body), `"exit_code":0`, `"exit_code":3`, 1))
	changed[5] = m
	rep = audit(changed, head)
	has(rep, Mismatch, 6, "is not the event the record was built from")
	has(rep, Chain, 10, "something at or before #10")

	// A change after the head leaves the head standing.
	late := append([]Raw(nil), l.raws...)
	m = late[14]
	m.Headers = nats.Header{}
	for k, v := range late[14].Headers {
		m.Headers[k] = v
	}
	m.Headers.Set(events.HeaderTime, t0.Add(time.Hour).Format(time.RFC3339Nano))
	late[14] = m
	rep = audit(late, head)
	for _, f := range rep.Findings {
		if f.Kind == Chain {
			t.Errorf("a change after the head broke it: %+v", f)
		}
	}
	has(rep, Mismatch, 15, "is not the event")

	// A head past the end of a cut log.
	rep = audit(l.raws[:8], head)
	has(rep, Chain, 10, "has no message #10")

	// A ledger whose record lists an event twice: the log is whole, and
	// the record's events_digest differs, but the finding says why.
	twice := recordsOf(clean)
	for i, r := range twice {
		if r.Job == "a" {
			c := *r
			c.Events = append(append([]hold.EventRef(nil), r.Events[:5]...), r.Events[4:]...)
			twice[i] = &c
		}
	}
	rep = auditWith(twice, l.raws)
	has(rep, Mismatch, 6, "lists RunStopped #6 more than once")
}

func recordsOf(r *Report) []*hold.HoldRecord {
	var out []*hold.HoldRecord
	for _, rec := range r.Records {
		out = append(out, rec)
	}
	return out
}

// TestRepeatedRequestsAreNoFault: a client may ask twice; the repeat is
// listed (a cancel) or left out (a request), never a finding.
func TestRepeatedRequestsAreNoFault(t *testing.T) {
	t.Parallel()
	l := newLog(t)
	l.submitted("j").add("j", &events.JobRequested{Submitter: "mallory", Spec: spec}).
		add("j", &events.CancelRequested{By: "a"}).add("j", &events.CancelRequested{By: "a"}).
		add("j", &events.JobCancelled{Reason: "asked"})
	rep := l.audit(Options{})
	if !rep.OK() {
		t.Fatalf("findings: %+v", rep.Findings)
	}
	r := rep.Records["j"]
	if r.Submitter != "alice" || len(r.Events) != 5 {
		t.Errorf("record = %s, %d events; want alice's, the repeated request left out", r.Submitter, len(r.Events))
	}
}

// TestExportRoundTrip: an export line gives back the exact stored bytes.
func TestExportRoundTrip(t *testing.T) {
	t.Parallel()
	lines := `{"seq":1,"subject":"e31.job.x.requested","headers":{"ce-id":["x/requested"]},"body":{"a": 1}}
{"seq":2,"subject":"e31.job.x.requested","headers":{},"body":"not json","body_base64":"bm90IGpzb24="}
`
	a := New(Options{})
	if err := a.ReadExport(strings.NewReader(lines)); err != nil {
		t.Fatal(err)
	}
	rep := a.Finish()
	if rep.Events != 2 || rep.LastSeq != 2 {
		t.Errorf("read %d events to #%d", rep.Events, rep.LastSeq)
	}
	var c HashChain
	c.Add(1, Digest(Raw{Seq: 1, Subject: "e31.job.x.requested", Headers: nats.Header{"ce-id": {"x/requested"}}, Body: []byte(`{"a": 1}`)}))
	c.Add(2, Digest(Raw{Seq: 2, Subject: "e31.job.x.requested", Headers: nats.Header{}, Body: []byte("not json")}))
	if rep.Head != c.Head() {
		t.Errorf("head %v, want %v: the exact bytes", rep.Head, c.Head())
	}
	if err := New(Options{}).ReadExport(strings.NewReader("{\"seq\":1}\nnot an export\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad line: %v", err)
	}
}

// TestExpiryOfAnOldBoot: a node that announced itself again is alive,
// whatever is said later of the boot it replaced.
func TestExpiryOfAnOldBoot(t *testing.T) {
	t.Parallel()
	h := holdOf("n1", 1, 1)
	l := newLog(t)
	l.add("n1", &events.NodeAnnounced{Node: "n1", Boot: "b2", CPU: 2, MemoryBytes: 4 << 30, GPU: 1, DiskBytes: 8 << 30}).
		add("n1", &events.NodeExpired{Node: "n1", Boot: "b1", Reason: "late"}).
		submitted("j").add("j", &events.ComputeHeld{Hold: h, Spec: spec})
	if rep := l.audit(Options{}); !rep.OK() {
		t.Errorf("findings: %+v", rep.Findings)
	}
}

// TestHoldOnAnUnisolatedNodeWithoutLeave: RENT never holds a job on a node
// that runs jobs without isolation unless its operator allowed it; a hold
// there is a capacity finding. An announcement without isolation (older
// nodes) is taken as before.
func TestHoldOnAnUnisolatedNodeWithoutLeave(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		iso     events.Isolation
		allow   bool
		finding bool
	}{
		{"isolation none", events.IsolationNone, false, true},
		{"isolation none, allowed", events.IsolationNone, true, false},
		{"sandbox", events.IsolationSandbox, false, false},
		{"no isolation announced", "", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := &log{t: t}
			l.add("n1", &events.NodeAnnounced{Node: "n1", Boot: "b1", CPU: 2, MemoryBytes: 4 << 30, GPU: 1, DiskBytes: 8 << 30,
				Isolation: tt.iso, AllowUnisolated: tt.allow})
			l.submitted("a").life("a", holdOf("n1", 1, 1), true)
			rep := l.audit(Options{})
			found := len(rep.Findings) == 1 && rep.Findings[0].Kind == Capacity && rep.Findings[0].Job == "a" &&
				strings.Contains(rep.Findings[0].Detail, "isolation none without allow_unisolated")
			if tt.finding != found || !tt.finding && !rep.OK() {
				t.Errorf("findings = %+v, want a capacity finding about isolation: %v", rep.Findings, tt.finding)
			}
		})
	}
}
