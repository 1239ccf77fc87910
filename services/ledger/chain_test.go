package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/services/ledger"
)

// vector is the worked example of pkg/chain/SPEC.md: one stored
// message and the digest, chain value and events digest the written
// definition gives (computed apart from this code, with Python's hashlib).
// The audit's tests check their own implementation against the same.
var vector = struct {
	msg                  ledger.Stored
	digest, head, record string
}{
	msg: ledger.Stored{
		Seq:     7,
		Subject: "e31.job.vec-1.submitted",
		Header: nats.Header{
			"ce-specversion": {"1.0"}, "ce-id": {"vec-1/submitted"}, "ce-type": {"e31.job.submitted.v1"},
			"ce-source": {"e31/submit/host-1"}, "ce-time": {"2026-12-02T12:00:00.1Z"}, "ce-subject": {"vec-1"},
			"content-type": {"application/json"}, "Nats-Msg-Id": {"vec-1/submitted"},
		},
		Data: []byte(`{"submitter":"alice","spec":{"work":{"command":["/bin/true"]},"request":{"cpu":1,"memory_bytes":536870912,"gpu":0,"disk_bytes":1073741824,"limit_seconds":600}}}`),
	},
	digest: "sha256:f7f79dfc907535a225b8efe508f63972d9b2b8e038f7412667a99ec4327aca25",
	head:   "7:19471283aec3247aeaf4cf3f61dbade6cb97c4bc904a822653eb17c6ce3cabd9",
	record: "sha256:308524655b5e4de8b0c1a1dd62342f39e3d1004d1ad20a1a332a8b46ad00003a",
}

func TestEventDigestIsTheWrittenDefinition(t *testing.T) {
	t.Parallel()
	p := ledger.NewProjection()
	applied(t, p.ApplyStored(vector.msg))
	r := p.Record("vec-1")
	if r == nil || len(r.Events) != 1 {
		t.Fatalf("record = %+v, want one event", r)
	}
	if r.Events[0].Digest != vector.digest {
		t.Errorf("event digest = %s, want %s", r.Events[0].Digest, vector.digest)
	}
	if r.EventsDigest != vector.record {
		t.Errorf("events_digest = %s, want %s", r.EventsDigest, vector.record)
	}
	if got := p.Head().String(); got != vector.head {
		t.Errorf("head = %s, want %s", got, vector.head)
	}
}

// TestEventDigestCoversWhatTheEventSays: a change to the sequence, subject,
// a CloudEvents attribute or the body changes the digest; a transport
// header does not.
func TestEventDigestCoversWhatTheEventSays(t *testing.T) {
	t.Parallel()
	digest := func(change func(*ledger.Stored)) string {
		m := vector.msg
		m.Header = nats.Header{}
		for k, v := range vector.msg.Header {
			m.Header[k] = append([]string(nil), v...)
		}
		m.Data = append([]byte(nil), vector.msg.Data...)
		change(&m)
		p := ledger.NewProjection()
		applied(t, p.ApplyStored(m))
		return p.Head().Hash
	}
	same := digest(func(*ledger.Stored) {})
	for name, change := range map[string]func(*ledger.Stored){
		"sequence":  func(m *ledger.Stored) { m.Seq = 8 },
		"ce-time":   func(m *ledger.Stored) { m.Header.Set("ce-time", "2026-12-02T12:00:00.2Z") },
		"ce-source": func(m *ledger.Stored) { m.Header.Set("ce-source", "e31/submit/host-2") },
		"a second value of an attribute": func(m *ledger.Stored) {
			m.Header.Add("ce-subject", "vec-2")
		},
		"a new extension attribute": func(m *ledger.Stored) { m.Header.Set("ce-traceparent", "00-1") },
		"body":                      func(m *ledger.Stored) { m.Data[len(m.Data)-2] = '1' },
	} {
		if digest(change) == same {
			t.Errorf("changing the %s leaves the digest as it was", name)
		}
	}
	if digest(func(m *ledger.Stored) { m.Header.Set("Nats-Msg-Id", "other") }) != same {
		t.Error("the Nats-Msg-Id header changed the digest: it is transport, not what the event says")
	}
}

// TestChainCoversMessagesThatDoNotDecode: a message that is not an event is
// in no record, but removing it still changes the head.
func TestChainCoversMessagesThatDoNotDecode(t *testing.T) {
	t.Parallel()
	junk := ledger.Stored{Seq: 8, Subject: "e31.job.vec-1.submitted", Header: nats.Header{"ce-id": {"x"}}, Data: []byte("not json")}
	with, without := ledger.NewProjection(), ledger.NewProjection()
	applied(t, with.ApplyStored(vector.msg))
	applied(t, with.ApplyStored(junk))
	applied(t, without.ApplyStored(vector.msg))
	if with.Head().Seq != 8 || with.Head() == without.Head() {
		t.Errorf("head with junk %v, without %v: want the junk in the chain", with.Head(), without.Head())
	}
	if n := len(with.Record("vec-1").Events); n != 1 {
		t.Errorf("the record lists %d events, want the one that decodes", n)
	}
	// Applying a message again changes nothing.
	before := with.Head()
	applied(t, with.ApplyStored(junk))
	applied(t, with.ApplyStored(vector.msg))
	if with.Head() != before {
		t.Errorf("applying old messages again moved the head to %v", with.Head())
	}
}

// TestMeterIsHeldResourcesTimesHeldTime: per attempt and in total, from
// ComputeHeld's ce-time to ComputeReleased's.
func TestMeterIsHeldResourcesTimesHeldTime(t *testing.T) {
	t.Parallel()
	var h history
	spec := specOf("gpu")
	big := events.Hold{Attempt: 1, Node: "n1", CPU: 2, MemoryBytes: 3 << 30, GPU: 1, DiskBytes: 1 << 30}
	small := events.Hold{Attempt: 2, Node: "n2", CPU: 0.5, MemoryBytes: 1 << 29, GPU: 0, DiskBytes: 1 << 30}
	h.add("gpu-1", at("0s"), &events.JobSubmitted{Submitter: "erin", Spec: spec})
	h.add("gpu-1", at("1s"), &events.ComputeHeld{Hold: big, Submitter: "erin", Spec: spec})
	h.add("gpu-1", at("2s"), &events.HoldLost{Hold: big, Reason: "lease expired"})
	h.add("gpu-1", at("11s"), &events.ComputeReleased{Hold: big, Outcome: events.NodeLost})
	h.add("gpu-1", at("20s"), &events.ComputeHeld{Hold: small, Submitter: "erin", Spec: spec})
	r := project(t, h.envs).Record("gpu-1")
	a1 := r.Attempts[0]
	if a1.HeldSeconds != 10 || a1.CPUCoreSeconds != 20 || a1.MemoryGiBSeconds != 30 || a1.GPUSeconds != 10 {
		t.Errorf("attempt 1 meter = %v s, %v core-s, %v GiB-s, %v gpu-s; want 10, 20, 30, 10",
			a1.HeldSeconds, a1.CPUCoreSeconds, a1.MemoryGiBSeconds, a1.GPUSeconds)
	}
	if r.Attempts[1].CPUCoreSeconds != 0 || r.CPUCoreSeconds != 20 {
		t.Errorf("while attempt 2 is held: its meter %v, total %v; want 0 and 20 (the meter stops at release)",
			r.Attempts[1].CPUCoreSeconds, r.CPUCoreSeconds)
	}
	h.add("gpu-1", at("24s"), &events.ComputeReleased{Hold: small, Outcome: events.Succeeded, Final: true})
	r = project(t, h.envs).Record("gpu-1")
	want := []float64{14, 22, 32, 10} // held, cpu, memory, gpu
	got := []float64{r.HeldSeconds, r.CPUCoreSeconds, r.MemoryGiBSeconds, r.GPUSeconds}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			t.Errorf("totals = %v, want %v (held, cpu-core, memory-GiB, gpu seconds)", got, want)
			break
		}
	}
	if r.Usage.CPUSeconds != 0 {
		t.Errorf("usage = %+v: the meter is not usage", r.Usage)
	}
}

// TestRepeatedEventChangesNothing: an event stored again after the
// duplicate window is listed (it is in the log) but changes nothing.
func TestRepeatedEventChangesNothing(t *testing.T) {
	t.Parallel()
	h := fullLife()
	once := project(t, h.envs).Record("count-clips-1")
	again := h.envs[len(h.envs)-1] // ComputeReleased
	again.Time = again.Time.Add(time.Hour)
	h.add("count-clips-1", again.Time, again.Event)
	twice := project(t, h.envs).Record("count-clips-1")
	if len(twice.Events) != len(once.Events)+1 {
		t.Errorf("the repeat is not listed: %d events", len(twice.Events))
	}
	if !twice.ReleasedAt.Equal(*once.ReleasedAt) || twice.HeldSeconds != once.HeldSeconds {
		t.Errorf("the repeat moved the release to %v (%v s)", twice.ReleasedAt, twice.HeldSeconds)
	}
}

func TestTotalsCutAtThePeriodsEdges(t *testing.T) {
	t.Parallel()
	var h history
	hold := func(node string, attempt int, cpu float64, gpu int) events.Hold {
		return events.Hold{Attempt: attempt, Node: node, CPU: cpu, MemoryBytes: 2 << 30, GPU: gpu}
	}
	life := func(job, who string, hd events.Hold, from, to string) {
		h.add(job, at(from), &events.JobSubmitted{Submitter: who, Spec: specOf(job)})
		h.add(job, at(from), &events.ComputeHeld{Hold: hd, Submitter: who, Spec: specOf(job)})
		if to != "" {
			h.add(job, at(to), &events.ComputeReleased{Hold: hd, Outcome: events.Succeeded, Final: true})
		}
	}
	life("a1", "alice", hold("n1", 1, 2, 0), "0s", "100s")   // across the start of the period
	life("a2", "alice", hold("n1", 1, 1, 1), "150s", "160s") // inside
	life("b1", "bob", hold("n2", 1, 4, 0), "190s", "250s")   // across the end
	life("b2", "bob", hold("n2", 1, 4, 0), "300s", "310s")   // after
	life("c1", "carol", hold("n3", 1, 1, 0), "120s", "")     // still held
	p := project(t, h.envs)

	got := totals(t, p, wire.TotalsRequest{Since: at("60s"), Until: at("200s")})
	want := []wire.Totals{
		{Submitter: "alice", Jobs: 2, Attempts: 2, HeldSeconds: 50, CPUCoreSeconds: 90, MemoryGiBSeconds: 100, GPUSeconds: 10},
		{Submitter: "bob", Jobs: 1, Attempts: 1, HeldSeconds: 10, CPUCoreSeconds: 40, MemoryGiBSeconds: 20},
		{Submitter: "carol", Open: 1},
	}
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Errorf("totals for [60s, 200s):\n%s\nwant\n%s", g, w)
	}
	// Periods that split the time add up to the whole.
	bob := func(ts []wire.Totals) float64 {
		for _, t := range ts {
			if t.Submitter == "bob" {
				return t.CPUCoreSeconds
			}
		}
		return 0
	}
	all := bob(totals(t, p, wire.TotalsRequest{}))
	first := bob(totals(t, p, wire.TotalsRequest{Until: at("200s")}))
	rest := bob(totals(t, p, wire.TotalsRequest{Since: at("200s")}))
	if first != 40 || rest != 240 || all != 280 {
		t.Errorf("bob: %v + %v core-seconds, in all %v; want 40 + 240 = 280", first, rest, all)
	}
	if only := totals(t, p, wire.TotalsRequest{Submitter: "bob"}); len(only) != 1 || only[0].Jobs != 2 {
		t.Errorf("bob alone: %+v", only)
	}
}

// TestServiceKeepsTheChainOverTheWholeLog runs the LEDGER on a real server:
// its head covers every stored message, including one that is no event, it
// is the same after a restart, and the queries say how far it has read.
func TestServiceKeepsTheChainOverTheWholeLog(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 30*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	for _, env := range twoAttempts().envs {
		if _, err := pub.Append(ctx, env.Subject, env.Event); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, "e31.job.retried-1.bogus", []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	want := projectStored(t, js)

	for round := range 2 {
		svc := runLedger(t, ctx, nc, js)
		select {
		case <-svc.CaughtUp():
		case <-ctx.Done():
			t.Fatal("the ledger never caught up")
		}
		var info wire.LedgerInfo
		ask(t, nc, wire.LedgerSubject(auth.AuditorName, wire.EndpointHead), nil, &info)
		if info.Head != want.Head() || !info.CaughtUp || info.Behind != 0 || info.Applied != 12 || info.Records != 1 {
			t.Errorf("round %d: info = %+v, want caught up at 12 with head %v", round, info, want.Head())
		}
		var totals wire.TotalsReply
		ask(t, nc, wire.LedgerSubject(auth.AuditorName, wire.EndpointTotals), wire.TotalsRequest{}, &totals)
		if len(totals.Submitters) != 1 || totals.Submitters[0].Submitter != "bob" || totals.Submitters[0].Attempts != 1 || totals.Submitters[0].LostAttempts != 1 {
			t.Errorf("round %d: totals = %+v, want bob's two attempts, one billed and one lost", round, totals)
		}
	}

	// A live event moves the head as it would have from scratch.
	svc := runLedger(t, ctx, nc, js)
	<-svc.CaughtUp()
	later, err := pub.Append(ctx, "other-1", &events.JobSubmitted{Submitter: "dan", Spec: specOf("other")})
	if err != nil {
		t.Fatal(err)
	}
	rep := record(t, nc, "other-1", later.Seq)
	if rep.Record == nil {
		t.Fatal("no record for the live event")
	}
	var info wire.LedgerInfo
	ask(t, nc, wire.LedgerSubject(auth.AuditorName, wire.EndpointHead), nil, &info)
	if want := projectStored(t, js).Head(); info.Head != want {
		t.Errorf("head after a live event = %v, want %v", info.Head, want)
	}
}

// runLedger runs a LEDGER until the test ends.
func runLedger(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream) *ledger.Service {
	t.Helper()
	svc, err := ledger.New(nc, js, ledger.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	return svc
}

// ask sends a query, retrying until some ledger answers.
func ask(t *testing.T, nc *nats.Conn, subject string, q, reply any) {
	t.Helper()
	b, _ := json.Marshal(q)
	deadline := time.Now().Add(10 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for {
		m, err := query.Ask(ctx, nc, subject, b)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
			<-time.After(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		if err := json.Unmarshal(m.Data, reply); err != nil {
			t.Fatal(err)
		}
		return
	}
}

// projectStored folds every stored message of the stream into a new
// projection, as the ledger does.
func projectStored(t *testing.T, js jetstream.JetStream) *ledger.Projection {
	t.Helper()
	ctx := natstest.Context(t, 10*time.Second)
	st, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	p := ledger.NewProjection()
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message #%d: %v", seq, err)
		}
		applied(t, p.ApplyStored(ledger.Stored{Seq: m.Sequence, Subject: m.Subject, Header: m.Header, Data: m.Data}))
	}
	return p
}

// totals asks p for totals, failing the test on an error.
func totals(t *testing.T, p *ledger.Projection, q wire.TotalsRequest) []wire.Totals {
	t.Helper()
	out, err := p.Totals(q)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
