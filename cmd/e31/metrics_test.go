package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/services/rent"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/stack"
)

// scrape gets url and parses Prometheus' text exposition.
func scrape(t *testing.T, url string) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	code, body := httpGet(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("GET %s: not Prometheus' text format: %v", url, err)
	}
	return fams, body
}

func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// value is the value of the sample of fam whose labels include labels
// (name, value, name, value…), and whether there is one.
func value(fams map[string]*dto.MetricFamily, fam string, labels ...string) (float64, bool) {
	f := fams[fam]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetricsAgreeWithTheLedger runs jobs that end every common way on a
// real e31 dev, scrapes /metrics over HTTP as Prometheus would, and checks
// the figures against what `e31 ledger` says of the same log.
func TestMetricsAgreeWithTheLedger(t *testing.T) {
	t.Parallel()
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 1, http: httpOptions{addr: "127.0.0.1:0"}})
	base := "http://" + ts.sys.EndpointsAddr()
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}

	ok := writeJob(t, "work: {command: [/bin/sh, -c, 'sleep 0.2']}\nrequest: {cpu: 1, memory: 64MiB, limit: 1m}\n", nil)
	fails := writeJob(t, "work: {command: [/bin/false]}\nrequest: {cpu: 0.5, memory: 32MiB, limit: 1m}\n", nil)
	long := writeJob(t, "work: {command: [/bin/sleep, '60']}\nrequest: {cpu: 1, memory: 32MiB, limit: 2m}\n", nil)
	orphan := writeJob(t, "work: {command: [/bin/true]}\nrequest: {cpu: 1, memory: 32MiB, limit: 1m}\nafter: [no-such-job]\n", nil)
	type job struct{ as, id string }
	var jobs []job
	for _, j := range []struct{ as, file string }{{"alice", ok}, {"alice", ok}, {"alice", fails}, {"bob", ok}, {"bob", long}, {"alice", orphan}} {
		out, errOut, code := ts.cliAs(j.as, "submit", "--quiet", "--json", j.file)
		var r struct{ ID string }
		if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
			t.Fatalf("e31 submit as %s: exit %d: %s %s", j.as, code, out, errOut)
		}
		jobs = append(jobs, job{j.as, r.ID})
	}
	if _, errOut, code := ts.cliAs("bob", "cancel", jobs[4].id); code != 0 {
		t.Fatalf("e31 cancel: exit %d: %s", code, errOut)
	}
	for _, j := range jobs {
		ts.waitAs(j.as, j.id)
	}

	// The ledger's view of the same log, as the operator sees it.
	out, errOut, code := ts.cliAs(events.Operator, "ledger", "--json")
	var recs []hold.HoldRecord
	if err := json.Unmarshal([]byte(out), &recs); code != 0 || err != nil {
		t.Fatalf("e31 ledger --json: exit %d, %v: %s", code, err, errOut)
	}
	out, errOut, code = ts.cliAs(events.Operator, "ledger", "--totals", "--json")
	var totals []wire.Totals
	if err := json.Unmarshal([]byte(out), &totals); code != 0 || err != nil {
		t.Fatalf("e31 ledger --totals --json: exit %d, %v: %s", code, err, errOut)
	}
	byState, byOutcome := map[string]float64{}, map[events.Outcome]float64{}
	holds := 0
	for _, r := range recs {
		byState[r.State]++
		byOutcome[r.Outcome]++
		holds += len(r.Attempts)
	}
	if len(recs) != len(jobs) || byOutcome[events.Succeeded] != 3 || byOutcome[events.Cancelled] != 1 || byOutcome[events.Rejected] != 1 {
		t.Fatalf("the ledger does not show the jobs run: %+v", byOutcome)
	}

	// The metrics follow the log on their own: wait for them to show
	// every job over.
	var fams map[string]*dto.MetricFamily
	var body []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		fams, body = scrape(t, base+"/metrics")
		over := 0.0
		for _, s := range []string{hold.StateReleased, hold.StateRejected, hold.StateCancelled} {
			v, _ := value(fams, "e31_jobs", "state", s)
			over += v
		}
		if over == float64(len(jobs)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the metrics show %g jobs over, the ledger %d", over, len(jobs))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, s := range []string{hold.StateSubmitted, hold.StateWaiting, hold.StateHeld, hold.StateRunning, hold.StateStopped,
		hold.StateReturned, hold.StateReleased, hold.StateRejected, hold.StateCancelled} {
		if got, _ := value(fams, "e31_jobs", "state", s); got != byState[s] {
			t.Errorf("e31_jobs{state=%q} = %g, the ledger has %g", s, got, byState[s])
		}
	}
	for o, n := range byOutcome {
		if got, _ := value(fams, "e31_jobs_finished_total", "outcome", string(o)); got != n {
			t.Errorf("e31_jobs_finished_total{outcome=%q} = %g, the ledger has %g", o, got, n)
		}
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(b)) }
	for _, tot := range totals {
		for fam, want := range map[string]float64{
			"e31_held_seconds_total":            tot.HeldSeconds,
			"e31_held_cpu_core_seconds_total":   tot.CPUCoreSeconds,
			"e31_held_memory_gib_seconds_total": tot.MemoryGiBSeconds,
			"e31_held_gpu_seconds_total":        tot.GPUSeconds,
		} {
			if got, _ := value(fams, fam, "submitter", tot.Submitter); !near(got, want) {
				t.Errorf("%s{submitter=%q} = %g, e31 ledger --totals says %g", fam, tot.Submitter, got, want)
			}
		}
	}
	if n, _ := value(fams, "e31_job_wait_seconds"); n != float64(holds) {
		t.Errorf("e31_job_wait_seconds counted %g waits, the ledger shows %d holds", n, holds)
	}
	if cpu, _ := value(fams, "e31_node_capacity", "node", "node-1", "resource", "cpu"); cpu != 2 {
		t.Errorf("e31_node_capacity of node-1's cpu: %g, want 2", cpu)
	}
	if held, ok := value(fams, "e31_node_held", "node", "node-1", "resource", "cpu"); !ok || held != 0 {
		t.Errorf("e31_node_held of node-1's cpu with every job over: %g (%v), want 0", held, ok)
	}
	up := 0.0
	for _, m := range fams["e31_nodes"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "state" && l.GetValue() == "up" {
				up += m.GetGauge().GetValue()
			}
		}
	}
	if up != 1 {
		t.Errorf("e31_nodes{state=up} sum to %g, want 1", up)
	}
	if pending, ok := value(fams, "e31_consumer_pending", "service", "submit"); !ok || pending != 0 {
		t.Errorf("e31_consumer_pending{service=submit} with every job over: %g (%v), want 0", pending, ok)
	}
	// What the services told as they worked: every step handled events
	// (the ledger reads the log with a reader of its own, no handler),
	// and the one RENT decided and leads.
	for _, svc := range []string{"submit", "rent", "run", "output", "release"} {
		if n, ok := value(fams, "e31_handler_seconds", "service", svc); !ok || n < 1 {
			t.Errorf("e31_handler_seconds{service=%q} counted %g (%v), want every handling", svc, n, ok)
		}
	}
	if n, ok := value(fams, "e31_scheduler_decision_seconds"); !ok || n < 1 {
		t.Errorf("e31_scheduler_decision_seconds counted %g (%v) passes", n, ok)
	}
	if v, ok := value(fams, "e31_scheduler_leader", "scheduler", "rent-1"); !ok || v != 1 {
		t.Errorf("e31_scheduler_leader{scheduler=rent-1} = %g (%v), want 1", v, ok)
	}
	for _, fam := range []string{"go_goroutines", "process_cpu_seconds_total", "e31_events_total", "e31_consumer_ack_pending"} {
		if fams[fam] == nil {
			t.Errorf("no %s in /metrics", fam)
		}
	}
	for _, l := range strings.Split(string(body), "\n") {
		if strings.Contains(l, jobs[0].id) {
			t.Errorf("a job id in a label: %s", l)
		}
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "e31_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once caught up: %d %s", code, body)
	}
}

func TestEndpointsBeyondLoopbackNeedAToken(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	_, err := httpOptions{addr: "0.0.0.0:0"}.listen(log, nil, nil)
	var exit *exitError
	if !errors.As(err, &exit) || exit.code != exitUsage {
		t.Errorf("--http 0.0.0.0:0 without a token: %v, want a usage error", err)
	}
	s, err := httpOptions{addr: ""}.listen(log, nil, nil)
	if s != nil || err != nil {
		t.Errorf(`--http "": %v, %v; want nothing served`, s, err)
	}
}

// serveOn runs service name as `e31 serve NAME --http 127.0.0.1:0` does,
// on nc, until the test ends, and returns where its endpoints listen.
func serveOn(t *testing.T, ctx context.Context, name string, nc *nats.Conn, js jetstream.JetStream, cfgs stack.Configs) string {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	var cs []prometheus.Collector
	if name == "rent" {
		sched := metrics.NewScheduler()
		cfgs.Rent.Observer = sched
		cs = append(cs, sched)
	}
	ends, stop, err := stack.StartEndpoints(ctx, stack.AloneConfig{Name: name, NC: nc, JS: js, Addr: "127.0.0.1:0", Logger: log}, cs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	// Not ready before the service runs, and it says so.
	if code, body := httpGet(t, "http://"+ends.Addr()+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "service: starting") {
		t.Errorf("serve %s before it runs: /readyz %d %s, want 503 saying it is starting", name, code, body)
	}
	sctx, cancel := context.WithCancel(ends.Observe(ctx))
	svc, err := stack.NewService(name, nc, js, cfgs, log)
	if err != nil {
		t.Fatal(err)
	}
	ends.Serving(svc)
	done := make(chan error, 1)
	go func() { done <- svc.Run(sctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("serve %s: %v", name, err)
		}
	})
	return ends.Addr()
}

// waitReady waits for /readyz at addr to answer 200.
func waitReady(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := httpGet(t, "http://"+addr+"/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/readyz: %d %s", addr, code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServeEndpoints checks the endpoints of `e31 serve` on a real server:
// each service is ready once connected, its consumer attached and caught
// up (RENT: leading, or a warm standby), says why not before; it serves
// its handlers' and its consumers' figures, RENT its scheduler's, and the
// ledger alone the figures of the log.
func TestServeEndpoints(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	nc := js.Conn()
	ctx := natstest.Context(t, time.Minute)
	if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	// Something in the log before they start: each must catch up with it.
	pub := bus.NewPublisher(js, "e31/test", time.Now)
	if _, err := pub.Append(ctx, "node-x", &events.NodeAnnounced{Node: "node-x", Boot: "b1", CPU: 2, MemoryBytes: 1 << 30, DiskBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{}
	for _, name := range []string{"ledger", "submit", "rent"} {
		addrs[name] = serveOn(t, ctx, name, nc, js, stack.Configs{Rent: rent.Config{Instance: "rent-a"}})
	}
	for name, addr := range addrs {
		waitReady(t, addr)
		fams, _ := scrape(t, "http://"+addr+"/metrics")
		if _, ok := fams["e31_jobs"]; ok != (name == "ledger") {
			t.Errorf("serve %s: e31_jobs served: %v", name, ok)
		}
		if fams["go_goroutines"] == nil {
			t.Errorf("serve %s: no Go runtime metrics", name)
		}
		if name == "ledger" {
			// It reads the log with a reader of its own: no consumer.
			continue
		}
		if pending, ok := value(fams, "e31_consumer_pending", "service", name); !ok || pending != 0 {
			t.Errorf("serve %s: e31_consumer_pending{service=%s} = %g (%v), want 0 once ready", name, name, pending, ok)
		}
		if _, ok := value(fams, "e31_consumer_ack_pending", "service", name); !ok {
			t.Errorf("serve %s: no e31_consumer_ack_pending", name)
		}
	}
	// RENT rebuilt itself from what was logged before it started; what
	// comes now its handler handles.
	if _, err := pub.Append(ctx, "node-y", &events.NodeAnnounced{Node: "node-y", Boot: "b1", CPU: 2, MemoryBytes: 1 << 30, DiskBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(30 * time.Second)
	for {
		fams, _ = scrape(t, "http://"+addrs["rent"]+"/metrics")
		if n, _ := value(fams, "e31_handler_seconds", "service", "rent", "handler", "rent"); n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("serve rent: e31_handler_seconds{service=rent} never counted the node's event")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// It leads, alone.
	deadline = time.Now().Add(30 * time.Second)
	for {
		fams, _ := scrape(t, "http://"+addrs["rent"]+"/metrics")
		leader, _ := value(fams, "e31_scheduler_leader")
		if leader == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("e31_scheduler_leader of the only RENT: %g, want 1", leader)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A second RENT is a warm standby: ready, not leading.
	standby := serveOn(t, ctx, "rent", nc, js, stack.Configs{Rent: rent.Config{Instance: "rent-b"}})
	waitReady(t, standby)
	fams, _ = scrape(t, "http://"+standby+"/metrics")
	if leader, ok := value(fams, "e31_scheduler_leader"); !ok || leader != 0 {
		t.Errorf("e31_scheduler_leader of the standby: %g (%v), want 0", leader, ok)
	}

	if e, stop, err := stack.StartEndpoints(ctx, stack.AloneConfig{Name: "rent", NC: nc, JS: js, Logger: slog.New(slog.DiscardHandler)}); e != nil || err != nil {
		t.Errorf("serve without --http: %v, %v; want nothing served", e, err)
	} else {
		stop()
	}
}

// TestDevStartsWhenTheDefaultAddressIsTaken: a second e31 dev on this
// machine starts without its endpoints rather than not at all, unless
// --http was given.
func TestDevStartsWhenTheDefaultAddressIsTaken(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ts := startSystemWith(t, t.TempDir(), devOptions{nodes: 1, http: httpOptions{addr: taken.Addr().String()}})
	if ts.sys.EndpointsAddr() != "" {
		t.Errorf("serving on %s, which was taken", ts.sys.EndpointsAddr())
	}
	a := &app{out: io.Discard, errOut: io.Discard, log: slog.New(slog.DiscardHandler)}
	_, err = startDev(context.Background(), a, devOptions{dir: t.TempDir(), listen: "127.0.0.1:0", nodes: 1,
		node: run.Config{CPU: 1, MemoryBytes: jobfile.GiB, DiskBytes: jobfile.GiB, ExecutorKind: run.ExecProcess}, sync: "interval", http: httpOptions{addr: taken.Addr().String(), asked: true}})
	if err == nil {
		t.Error("e31 dev started although the --http it was given is taken")
	}
}
