package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
)

// appendJobs appends n jobs of three submitters from job number first:
// every third still waits, the others are held and released (a fifth of
// them on a second attempt). It returns the last sequence.
func appendJobs(t *testing.T, ctx context.Context, pub *bus.Publisher, first, n int) uint64 {
	t.Helper()
	var last uint64
	add := func(job string, ev events.Event) {
		env, err := pub.Append(ctx, job, ev)
		if err != nil {
			t.Fatal(err)
		}
		last = env.Seq
	}
	for i := first; i < first+n; i++ {
		job, who := fmt.Sprintf("job-%04d", i), fmt.Sprintf("team-%d", i%3)
		spec := events.JobSpec{Name: job, Work: events.Work{Command: []string{"true"}}, Request: events.Request{CPU: 1.5, MemoryBytes: 1 << 30, LimitSeconds: 60}}
		add(job, &events.JobRequested{Submitter: who, Spec: spec})
		add(job, &events.JobSubmitted{Submitter: who, Spec: spec})
		if i%3 == 0 {
			continue
		}
		for attempt := 1; attempt <= 1+btoi(i%5 == 0); attempt++ {
			h := events.Hold{Attempt: attempt, Node: fmt.Sprintf("n%d", attempt), CPU: 1.5, MemoryBytes: 1 << 30}
			add(job, &events.ComputeHeld{Hold: h, Submitter: who, Spec: spec})
			add(job, &events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: attempt == 1+btoi(i%5 == 0)})
		}
	}
	return last
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// answers is what the ledger tells the operator and a submitter about
// everything: every page of the list, totals with and without a period, a
// few records, and its head, as JSON.
func answers(t *testing.T, nc *nats.Conn, minSeq uint64) string {
	t.Helper()
	ask := func(user, endpoint string, q, reply any) {
		t.Helper()
		data, _ := json.Marshal(q)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		m, err := query.Ask(ctx, nc, wire.LedgerSubject(user, endpoint), data)
		if err != nil {
			t.Fatalf("ask %s as %s: %v", endpoint, user, err)
		}
		if err := json.Unmarshal(m.Data, reply); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]any{}
	for _, user := range []string{events.Operator, "team-1"} {
		var all []any
		q := wire.ListRequest{MinSeq: minSeq, Limit: 70}
		for {
			var page wire.ListReply
			ask(user, wire.EndpointList, q, &page)
			if page.Error != "" {
				t.Fatalf("list as %s: %s", user, page.Error)
			}
			for _, r := range page.Records {
				all = append(all, r)
			}
			if !page.More {
				break
			}
			q.After = page.Records[len(page.Records)-1].Job
		}
		out["list "+user] = all
		for _, period := range []wire.TotalsRequest{{MinSeq: minSeq}, {MinSeq: minSeq, Until: time.Now().Add(-time.Hour)}, {MinSeq: minSeq, Since: time.Now().Add(-time.Hour)}} {
			var totals wire.TotalsReply
			ask(user, wire.EndpointTotals, period, &totals)
			out[fmt.Sprintf("totals %s %v", user, period.Since.IsZero())+fmt.Sprint(period.Until.IsZero())] = totals
		}
		for _, job := range []string{"job-0001", "job-0003", "job-0120", "job-0299", "nobody"} {
			var rec wire.RecordReply
			ask(user, wire.EndpointRecord, wire.RecordRequest{Job: job, MinSeq: minSeq}, &rec)
			out["record "+user+" "+job] = rec
		}
	}
	var head wire.LedgerInfo
	ask(events.Operator, wire.EndpointHead, nil, &head)
	head.LastSeq, head.Behind = 0, 0
	out["head"] = head
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// run starts a ledger and waits until it has caught up; stop ends it and
// waits for Run.
func run(t *testing.T, nc *nats.Conn, js jetstream.JetStream) (svc *Service, stop func()) {
	t.Helper()
	return runWith(t, nc, js, nil)
}

// runWith is run with obs told what the ledger mends (none if nil).
func runWith(t *testing.T, nc *nats.Conn, js jetstream.JetStream, obs Observer) (svc *Service, stop func()) {
	t.Helper()
	svc, err := New(nc, js, Config{Logger: slog.New(slog.DiscardHandler), FlushEvery: time.Hour, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case <-svc.CaughtUp():
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("the ledger did not catch up within 60 s")
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return svc, stop
}

// fromScratch is what a ledger that folds the whole log, every job in memory
// (the ledger before checkpoints), answers: served by a ledger whose
// bucket is emptied first.
func fromScratch(t *testing.T, nc *nats.Conn, js jetstream.JetStream, last uint64) string {
	t.Helper()
	ctx := natstest.Context(t, 10*time.Second)
	st, err := js.Stream(ctx, "KV_"+events.LedgerBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	svc, stop := run(t, nc, js)
	defer stop()
	if from, folded := svc.Started(); from != 0 || folded != last {
		t.Fatalf("from scratch: started from #%d and folded %d messages; want #0 and %d", from, folded, last)
	}
	return answers(t, nc, last)
}

// TestARestartResumesFromTheCheckpoint: a ledger stopped and started again
// folds in only what the log holds after its checkpoint, and answers every
// query exactly as a ledger that folded the whole log does.
func TestARestartResumesFromTheCheckpoint(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 120*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	last := appendJobs(t, ctx, pub, 0, 300) // over flushAt jobs: flushes on the way

	svc, stop := run(t, nc, js)
	if from, folded := svc.Started(); from != 0 || folded != last {
		t.Fatalf("first start: from #%d, folded %d; want #0 and %d", from, folded, last)
	}
	before := answers(t, nc, last)
	svc.mu.Lock()
	inMemory := len(svc.proj.jobs)
	svc.mu.Unlock()
	stop()
	// After the last flush only open jobs stay: a third of them wait.
	if err := func() error {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		if n := len(svc.proj.jobs); n != 100 {
			return fmt.Errorf("%d jobs in memory after the last flush (%d before), want the 100 still waiting", n, inMemory)
		}
		return nil
	}(); err != nil {
		t.Error(err)
	}

	svc, stop = run(t, nc, js)
	if from, folded := svc.Started(); from != last || folded != 0 {
		t.Errorf("restart: from #%d, folded %d; want #%d and nothing", from, folded, last)
	}
	if after := answers(t, nc, last); after != before {
		t.Errorf("after a restart the ledger answers\n%s\nwant (before it)\n%s", after, before)
	}
	// More of the log, folded in live, then a restart from the checkpoint
	// written at the end: the answers are those of the whole log.
	more := appendJobs(t, ctx, pub, 300, 20)
	live := answers(t, nc, more)
	stop()
	svc, stop = run(t, nc, js)
	if from, folded := svc.Started(); from != more || folded != 0 {
		t.Errorf("second restart: from #%d, folded %d; want #%d and nothing", from, folded, more)
	}
	if again := answers(t, nc, more); again != live {
		t.Errorf("after the second restart the ledger answers\n%s\nwant\n%s", again, live)
	}
	stop()
	if whole := fromScratch(t, nc, js, more); whole != live {
		t.Errorf("the ledger that resumed answers\n%s\nwhere one that folded the whole log answers\n%s", live, whole)
	}
}

// TestACrashBetweenWritesLeavesTheLastCheckpoint: a ledger that dies in
// the middle of a flush, its records written but not the checkpoint,
// leaves the bucket as of its last whole flush: the next start resumes
// from there and folds the rest in as the first time.
func TestACrashBetweenWritesLeavesTheLastCheckpoint(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := srv.Conn(t)
	ctx := natstest.Context(t, 120*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	first := appendJobs(t, ctx, pub, 0, 30)
	_, stop := run(t, nc, js)
	stop()
	last := appendJobs(t, ctx, pub, 30, 30)

	// The crash: a projection opened from the checkpoint folds the rest of
	// the log in and writes every record of its flush, then dies before
	// the checkpoint, the batch's commit.
	p, st := foldFromBucket(t, ctx, nc, js, last)
	if p.Applied() != last || st.base.Load() == 0 {
		t.Fatalf("the projection that crashes folded up to #%d from base %d, want #%d from the checkpoint of #%d", p.Applied(), st.base.Load(), last, first)
	}
	msgs, err := st.messages(p.flushOf())
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 3 {
		t.Fatalf("a flush of %d writes: nothing to crash in the middle of", len(msgs))
	}
	if _, err := publishAtomic(ctx, nc, msgs, false); err != nil {
		t.Fatal(err)
	}

	svc, stop := run(t, nc, js)
	if from, folded := svc.Started(); from != first || folded != last-first {
		t.Errorf("after the crash: from #%d, folded %d; want #%d (the last whole flush) and %d", from, folded, first, last-first)
	}
	got := answers(t, nc, last)
	stop()
	if whole := fromScratch(t, nc, js, last); got != whole {
		t.Errorf("after the crash the ledger answers\n%s\nwhere one that folded the whole log answers\n%s", got, whole)
	}
}
