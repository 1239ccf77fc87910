package audit

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// busy builds a log of n jobs whose lives interleave, width at a time, as
// on a busy pool, every one released in the end.
func busy(t testing.TB, n, width int) *log {
	l := &log{t: t}
	l.add("n1", &events.NodeAnnounced{Node: "n1", Boot: "b1", CPU: 1000, MemoryBytes: 1 << 50, GPU: 0, DiskBytes: 1 << 50})
	zero := 0
	for round := 0; round < n; round += width {
		var lives [][]func()
		for k := round; k < min(round+width, n); k++ {
			job := fmt.Sprintf("job-%05d", k)
			h := holdOf("n1", 1, 1)
			var life []func()
			step := func(ev events.Event) { life = append(life, func() { l.add(job, ev) }) }
			step(&events.JobRequested{Submitter: "alice", Spec: spec})
			step(&events.JobSubmitted{Submitter: "alice", Spec: spec})
			step(&events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec})
			step(&events.RunStarted{Hold: h})
			step(&events.RunStopped{Hold: h, Outcome: events.Succeeded, ExitCode: &zero})
			step(&events.OutputReturned{Hold: h, Outcome: events.Succeeded, Files: []events.OutputFile{}, Missing: []string{}})
			step(&events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true})
			if k%3 == 0 { // asked to delete after the end, and deleted
				step(&events.DeleteRequested{What: events.WhatAll, By: "alice"})
				step(&events.Deleted{What: events.WhatOutput, Cause: events.CauseRequested})
			}
			lives = append(lives, life)
		}
		for s := 0; ; s++ {
			more := false
			for _, life := range lives {
				if s < len(life) {
					life[s]()
					more = true
				}
			}
			if !more {
				break
			}
		}
	}
	return l
}

// TestMemoryIsBoundedByOpenJobs: the audit holds the history of the jobs
// still open, not of every job it has read; with Forget it keeps nothing
// of a job once it is over.
func TestMemoryIsBoundedByOpenJobs(t *testing.T) {
	t.Parallel()
	const jobs, width = 600, 12
	l := busy(t, jobs, width)
	l.submitted("still-open").add("still-open", &events.ComputeHeld{Hold: holdOf("n1", 1, 1), Submitter: "alice", Spec: spec})
	for _, forget := range []bool{true, false} {
		a := New(Options{Forget: forget})
		for _, r := range l.raws {
			a.Add(r)
		}
		if len(a.open) != 1 || a.open["still-open"] == nil {
			t.Errorf("forget %v: %d jobs held open after the stream, want 1 (still-open)", forget, len(a.open))
		}
		if a.maxOpen > width+1 {
			t.Errorf("forget %v: %d jobs were held open at once, where at most %d were", forget, a.maxOpen, width+1)
		}
		if kept := len(a.rep.Records); forget && kept != 0 || !forget && kept != jobs {
			t.Errorf("forget %v: %d records kept before the end", forget, kept)
		}
		rep := a.Finish()
		if !rep.OK() || rep.Jobs != jobs+1 {
			t.Fatalf("forget %v: %s %v", forget, rep.Summary(), rep.Findings)
		}
		if forget && (len(rep.Records) != 1 || rep.Records["still-open"] == nil) {
			t.Errorf("forget: records %d at the end, want the open job's alone", len(rep.Records))
		}
	}
}

// TestRecordsAfterTheEnd: what the log says of a job after its end (a
// deletion asked and done) is in its kept record as if the whole history
// had been derived at once, and a deletion stored twice is still found.
func TestRecordsAfterTheEnd(t *testing.T) {
	t.Parallel()
	l := newLog(t)
	l.submitted("j").life("j", holdOf("n1", 1, 1), true).
		add("j", &events.DeleteRequested{What: events.WhatAll, By: "alice"}).
		add("j", &events.JobRequested{Submitter: "alice", Spec: spec}). // the same request again: set aside, not listed
		add("j", &events.Deleted{What: events.WhatOutput, Cause: events.CauseRequested}).
		add("j", &events.Deleted{What: events.WhatAll, Cause: events.CauseRequested})
	rep := l.audit(Options{})
	if !rep.OK() {
		t.Fatalf("findings: %+v", rep.Findings)
	}
	r := rep.Records["j"]
	var facts []fact
	for _, raw := range l.raws[1:] {
		var d decoded
		decodeInto(&d, raw)
		f := fact{seq: d.env.Seq, typ: typeNames[d.env.Type], id: d.id, at: d.env.Time.UTC(), digest: d.digest, ev: d.env.Event}
		for _, g := range facts {
			f.repeat = f.repeat || g.id == f.id
		}
		facts = append(facts, f)
	}
	whole := derive("j", facts, 0, true, nil).rec
	if !reflect.DeepEqual(r, whole) {
		a, _ := json.Marshal(r)
		b, _ := json.Marshal(whole)
		t.Errorf("record closed at the end and amended:\n%s\nderived from the whole history:\n%s", a, b)
	}
	if r.Output.DeletedAt == nil || r.DataDeletedAt == nil || len(r.Events) != 10 || rep.SetAside != 1 {
		t.Errorf("record after deletions: %+v, %d set aside", r, rep.SetAside)
	}

	dup := append([]Raw(nil), l.raws...)
	last := dup[len(dup)-1]
	last.Seq = uint64(len(dup) + 1)
	dup = append(dup, last)
	a := New(Options{Forget: true})
	for _, raw := range dup {
		a.Add(raw)
	}
	rep = a.Finish()
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != Duplicate || rep.Findings[0].Seq != last.Seq {
		t.Errorf("a deletion stored twice after the end: %+v", rep.Findings)
	}
}

// exported writes raws as an export (`e31 events --json`).
func exported(t *testing.T, raws []Raw) string {
	var b bytes.Buffer
	for _, r := range raws {
		line, err := json.Marshal(Exported{Seq: r.Seq, Subject: r.Subject, Headers: r.Headers, BodyBase64: base64.StdEncoding.EncodeToString(r.Body)})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	return b.String()
}

// TestPipelineKeepsTheLogsOrder: decoding on many workers, in batches that
// finish in any order, the audit finds what depends on the log's order
// exactly as when it takes one message after another: a message out of
// stream order, an event before the one it must follow, a chain that does
// not pass through a head.
func TestPipelineKeepsTheLogsOrder(t *testing.T) {
	t.Parallel()
	l := busy(t, 400, 16) // several batches
	if len(l.raws) < 4*readBatch {
		t.Fatalf("%d messages: too few to make batches", len(l.raws))
	}
	raws := append([]Raw(nil), l.raws...)
	// Out of stream order, deep in the log: two messages swapped.
	i := 3*readBatch + 7
	raws[i], raws[i+1] = raws[i+1], raws[i]
	// A job returned before it was held, in another batch: its
	// OutputReturned moved before its ComputeHeld, both keeping their
	// sequences. (A start before its hold is a node's word about what it
	// did not hold: set aside, no finding.)
	var held, started int
	for k, r := range raws[readBatch:] {
		if strings.HasSuffix(r.Subject, ".held.n1") && held == 0 {
			held = readBatch + k
		}
		if held > 0 && strings.HasPrefix(r.Subject, strings.Split(raws[held].Subject, ".held")[0]) && strings.HasSuffix(r.Subject, ".returned") {
			started = readBatch + k
			break
		}
	}
	raws[held], raws[started] = raws[started], raws[held]
	var c HashChain
	for _, r := range l.raws[:2*readBatch] {
		c.Add(r.Seq, Digest(r))
	}
	good := c.Head()
	bad := chain.Head{Seq: good.Seq + 1, Hash: good.Hash}

	one := New(Options{Heads: []chain.Head{good, bad}})
	for _, r := range raws {
		one.Add(r)
	}
	want := one.Finish()
	piped := New(Options{Heads: []chain.Head{good, bad}, Workers: 8})
	if err := piped.ReadExport(strings.NewReader(exported(t, raws))); err != nil {
		t.Fatal(err)
	}
	got := piped.Finish()
	if !reflect.DeepEqual(got.Findings, want.Findings) || got.Head != want.Head || got.Events != len(raws) {
		t.Errorf("pipelined: %v, head %s\none by one: %v, head %s", got.Findings, got.Head, want.Findings, want.Head)
	}
	for _, w := range []struct {
		kind  string
		seq   uint64
		words string
	}{
		{Order, raws[i+1].Seq, "out of stream order"},
		{Order, raws[held].Seq, "never held"},
		{Chain, bad.Seq, "does not pass through"},
	} {
		found := false
		for _, f := range got.Findings {
			found = found || f.Kind == w.kind && f.Seq == w.seq && strings.Contains(f.Detail, w.words)
		}
		if !found {
			t.Errorf("want a %s finding at #%d saying %q; got %v", w.kind, w.seq, w.words, got.Findings)
		}
	}
}

// TestReadStreamReadsTheWholeLogInOrder: read from the server in several
// pulls, the log gives the chain and findings it gives one message at a
// time.
func TestReadStreamReadsTheWholeLogInOrder(t *testing.T) {
	t.Parallel()
	l := busy(t, 2*pullBatch/7+50, 8)
	_, js := publish(t, l.raws)
	ctx := natstest.Context(t, 60*time.Second)
	a := New(Options{Forget: true, Workers: 3})
	if err := a.ReadStream(ctx, js); err != nil {
		t.Fatal(err)
	}
	rep := a.Finish()
	want := l.audit(Options{Forget: true})
	if !rep.OK() || rep.Events != len(l.raws) || rep.Head != want.Head || rep.Jobs != want.Jobs {
		t.Errorf("from the server: %s (%d events, head %s); one by one: %s", rep.Summary(), rep.Events, rep.Head, want.Summary())
	}
}

// progress records what a reading told of how far it had come.
type progress struct {
	starts []string
	total  int64
	added  int64
	done   int
}

func (p *progress) Start(total int64, label string) {
	p.starts = append(p.starts, label)
	p.total = total
}
func (p *progress) Add(n int64) { p.added += n }
func (p *progress) Done()       { p.done++ }

// TestReadStreamTellsItsProgress: reading the log, the audit tells how
// many messages there are to read, counts every one it has read, and says
// when it is done: what `e31 audit` shows as a bar on a terminal.
func TestReadStreamTellsItsProgress(t *testing.T) {
	t.Parallel()
	l := busy(t, pullBatch/7+50, 8)
	_, js := publish(t, l.raws)
	ctx := natstest.Context(t, 60*time.Second)
	var p progress
	a := New(Options{Forget: true, Progress: &p})
	if err := a.ReadStream(ctx, js); err != nil {
		t.Fatal(err)
	}
	if n := int64(len(l.raws)); len(p.starts) != 1 || p.total != n || p.added != n || p.done != 1 {
		t.Errorf("progress of a log of %d messages: %+v", n, p)
	}
}

// publish stores raws in a test server's log, as their publishers would.
func publish(t testing.TB, raws []Raw) (*natstest.Server, jetstream.JetStream) {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 60*time.Second)
	if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, r := range raws {
		m := nats.NewMsg(r.Subject)
		m.Data, m.Header = r.Body, r.Headers
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 || i == len(raws)-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	return srv, js
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkReadStream is the audit of a log of busy's jobs read from a
// server: the figure to profile (go test -bench ReadStream -cpuprofile).
// `e31 bench ledger` gives the figure that counts, beside the read-only
// floor measured in the same run.
func BenchmarkReadStream(b *testing.B) {
	l := busy(b, 12_000, 48) // about 100k events
	_, js := publish(b, l.raws)
	ctx := natstest.Context(b, 10*time.Minute)
	b.ResetTimer()
	for b.Loop() {
		a := New(Options{Forget: true})
		if err := a.ReadStream(ctx, js); err != nil {
			b.Fatal(err)
		}
		if rep := a.Finish(); !rep.OK() || rep.Events != len(l.raws) {
			b.Fatal(rep.Summary())
		}
	}
	b.ReportMetric(float64(len(l.raws)*b.N)/b.Elapsed().Seconds(), "events/s")
}

func TestDeliveredReadsBothForms(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		reply                     string
		stream, consumer, pending uint64
		ok                        bool
	}{
		{"$JS.ACK.E31.c1.1.42.7.1764763200000000000.9", 42, 7, 9, true},
		{"$JS.ACK.hub.ACCHASH.E31.c1.1.42.7.1764763200000000000.0", 42, 7, 0, true},
		{"$JS.ACK.hub.ACCHASH.E31.c1.1.42.7.1764763200000000000.0.xyz", 42, 7, 0, true},
		{"$JS.ACK.E31.c1.1.x.7.1764763200000000000.9", 0, 0, 0, false},
		{"_INBOX.abc", 0, 0, 0, false},
		{"$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l.m", 0, 0, 0, false},
	} {
		s, c, at, p, ok := delivered(tt.reply)
		if ok != tt.ok || ok && (s != tt.stream || c != tt.consumer || p != tt.pending || !at.Equal(time.Unix(0, 1764763200000000000))) {
			t.Errorf("%s: %d %d %s %d %v", tt.reply, s, c, at, p, ok)
		}
	}
}
