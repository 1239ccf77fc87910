package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/ops"
)

var (
	t0   = time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	spec = events.JobSpec{Work: events.Work{Command: []string{"true"}}, Request: events.Request{CPU: 1, MemoryBytes: 1 << 30, LimitSeconds: 60}}
)

// appendLife appends the whole life of n jobs of submitter, each held for
// 10 s on node n1, with outcome, and returns the last sequence.
func appendLife(t *testing.T, ctx context.Context, js jetstream.JetStream, prefix, submitter string, n int, outcome events.Outcome) uint64 {
	t.Helper()
	for i := range n {
		job := fmt.Sprintf("%s-%d", prefix, i)
		h := events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 1 << 30}
		for k, ev := range []events.Event{
			&events.JobRequested{Submitter: submitter, Spec: spec},
			&events.JobSubmitted{Submitter: submitter, Spec: spec},
			&events.ComputeHeld{Hold: h, Submitter: submitter, Spec: spec},
			&events.RunStarted{Hold: h},
			&events.RunStopped{Hold: h, Outcome: outcome},
			&events.OutputReturned{Hold: h, Outcome: outcome},
			&events.ComputeReleased{Hold: h, Outcome: outcome, Final: true},
		} {
			secs := []float64{0, 1, 2, 3, 11, 11.5, 12}[k]
			msg, err := events.New(job, ev, "test", t0.Add(time.Duration(secs*float64(time.Second)))).Msg()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.PublishMsgAsync(msg); err != nil {
				t.Fatal(err)
			}
		}
		// A hundred jobs at a time: the client allows only so many
		// publishes without an answer.
		if i%100 == 99 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("publishing timed out")
			}
		}
	}
	info, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	return info.CachedInfo().State.LastSeq
}

// await looks at cond every few milliseconds until it holds, and fails the
// test if it does not before ctx ends.
func await(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not in time", what)
		case <-tick.C:
		}
	}
}

// start runs a collector of js's log for the test.
func start(t *testing.T, js jetstream.JetStream) *metrics.LogCollector {
	t.Helper()
	c := metrics.NewLogCollector(js, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return c
}

// awaitReady waits until c is ready, and checks on every look that it is
// never ready before it has folded in the log up to last.
func awaitReady(t *testing.T, ctx context.Context, c *metrics.LogCollector, last uint64) {
	t.Helper()
	await(t, ctx, "ready", func() bool {
		err := c.Ready(ctx)
		if err != nil && !errors.Is(err, metrics.ErrNotCaughtUp) {
			t.Fatalf("not ready for another reason than catching up: %v", err)
		}
		// The figures read after Ready said yes are at least as far on
		// as they were when it did.
		if f := c.Figures(); err == nil && f.Applied < last {
			t.Fatalf("ready at #%d, before the log's last event #%d", f.Applied, last)
		}
		return err == nil
	})
}

func TestCollectorFollowsTheLog(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	// Minutes, not one: the race detector on two busy cores takes most of
	// one to append the log alone.
	ctx := natstest.Context(t, 3*time.Minute)

	// A log long enough that catching up takes a while.
	last := appendLife(t, ctx, js, "old", "alice", 3000, events.Succeeded)
	began := time.Now()
	c := start(t, js)
	if err := c.Ready(ctx); !errors.Is(err, metrics.ErrNotCaughtUp) {
		t.Fatalf("ready before reading anything: %v", err)
	}
	awaitReady(t, ctx, c, last)
	took := time.Since(began)
	t.Logf("caught up with %d events in %s: %.0f events/s", last, took.Round(time.Millisecond), float64(last)/took.Seconds())
	f := c.Figures()
	if f.Jobs[hold.StateReleased] != 3000 || f.Finished[events.Succeeded] != 3000 {
		t.Errorf("jobs %v finished %v; want 3000 released and succeeded", f.Jobs, f.Finished)
	}

	// What is appended later is followed.
	last = appendLife(t, ctx, js, "new", "bob", 5, events.Failed)
	await(t, ctx, "follow what is appended later", func() bool { return c.Figures().Applied >= last })
	f = c.Figures()
	if f.Finished[events.Failed] != 5 || f.Meter["bob"].HeldSeconds != 50 || f.Meter["alice"].HeldSeconds != 30000 {
		t.Errorf("finished %v meter %+v", f.Finished, f.Meter)
	}

	// Messages that are not events are counted, and do not stop it.
	if _, err := js.Publish(ctx, "e31.job.junk.submitted", []byte("{")); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, "count an undecodable message", func() bool { return c.Figures().Events[metrics.TypeUndecodable] == 1 })
}

func TestCollectorExposition(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	msg, err := events.New("n1", &events.NodeAnnounced{Node: "n1", Boot: "b1", CPU: 4, MemoryBytes: 8 << 30, Isolation: events.IsolationSandbox}, "test", t0).Msg()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	last := appendLife(t, ctx, js, "j", "alice", 2, events.Succeeded)
	c := start(t, js)
	awaitReady(t, ctx, c, last)

	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP e31_held_seconds_total Seconds compute was held, summed over released attempts not lost with their node (the meter, as e31 ledger --totals bills it).
# TYPE e31_held_seconds_total counter
e31_held_seconds_total{submitter="alice"} 20
# HELP e31_jobs Jobs in each state, as e31 status names them; released, rejected and cancelled count every job that ended so.
# TYPE e31_jobs gauge
e31_jobs{state="cancelled"} 0
e31_jobs{state="held"} 0
e31_jobs{state="rejected"} 0
e31_jobs{state="released"} 2
e31_jobs{state="returned"} 0
e31_jobs{state="running"} 0
e31_jobs{state="stopped"} 0
e31_jobs{state="submitted"} 0
e31_jobs{state="waiting"} 0
# HELP e31_node_capacity What each node in the pool offers, as it announced it.
# TYPE e31_node_capacity gauge
e31_node_capacity{node="n1",resource="cpu",unit="core"} 4
e31_node_capacity{node="n1",resource="disk",unit="byte"} 0
e31_node_capacity{node="n1",resource="gpu",unit="gpu"} 0
e31_node_capacity{node="n1",resource="memory",unit="byte"} 8.589934592e+09
# HELP e31_nodes Nodes that announced themselves, up or lost, by the isolation they announced.
# TYPE e31_nodes gauge
e31_nodes{isolation="sandbox",state="lost"} 0
e31_nodes{isolation="sandbox",state="up"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "e31_held_seconds_total", "e31_jobs", "e31_node_capacity", "e31_nodes"); err != nil {
		t.Error(err)
	}
	// Every outcome has its series before a job ends so: a rate or an
	// alert over one (disk_exceeded too) exists from the start.
	if n := testutil.CollectAndCount(c, "e31_jobs_finished_total"); n != len(events.Outcomes) {
		t.Errorf("e31_jobs_finished_total has %d series, want one for each of the %d outcomes", n, len(events.Outcomes))
	}
	if n := testutil.CollectAndCount(c, "e31_job_wait_seconds", "e31_job_start_seconds", "e31_job_release_seconds"); n != 3 {
		t.Errorf("%d histograms, want 3", n)
	}
	if _, err := metrics.NewRegistry(c); err != nil {
		t.Errorf("registry with the runtime and process collectors: %v", err)
	}
}

// TestReadyzSaysNotReadyUntilCaughtUp serves /readyz over HTTP for a
// collector of a long log: it answers 503 with the reason until the
// collector has read the log as it was, and 200 from then on.
func TestReadyzSaysNotReadyUntilCaughtUp(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	last := appendLife(t, ctx, js, "j", "alice", 2000, events.Succeeded)

	c := metrics.NewLogCollector(js, slog.New(slog.DiscardHandler))
	s, err := ops.Listen(ops.Config{Addr: "127.0.0.1:0", Gatherer: prometheus.NewRegistry(), Ready: map[string]ops.Check{"log": c.Ready}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- s.Serve(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + s.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	// Before the collector reads anything, it is behind the whole log.
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "not caught up") {
		t.Fatalf("/readyz before reading the log: %d %q; want 503 and why", code, body)
	}
	followed := make(chan error, 1)
	go func() { followed <- c.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-followed; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the collector ended with %v, want nothing but the cancel", err)
		}
	})
	await(t, ctx, "/readyz says ready", func() bool {
		code, body := readyz()
		if code == http.StatusOK {
			if f := c.Figures(); f.Applied < last {
				t.Fatalf("/readyz ready at #%d, before the log's last event #%d", f.Applied, last)
			}
			return true
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "not caught up") {
			t.Fatalf("/readyz while catching up: %d %q", code, body)
		}
		return false
	})
}
