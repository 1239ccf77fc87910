package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/trace"
	"github.com/e31net/e31/services/rent"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/stack"
)

// LifeOptions is what Life measures.
type LifeOptions struct {
	// Jobs is the number of jobs in the burst.
	Jobs int
	// Idle is the number of jobs submitted one at a time on the idle pool.
	Idle int
	// Sync is the event store's durability: always or interval.
	Sync string
	// Executor is the nodes' executor: sandbox, process or auto.
	Executor string
	// Nodes is the number of compute nodes.
	Nodes int
	// Keep keeps the temporary directory.
	Keep bool
	// Metrics turns on what an operator watches, as `e31 dev` does: every
	// handler and the scheduler observed, the log's figures followed, and
	// the registry gathered every scrapeEvery, as deploy/'s Prometheus
	// scrapes it.
	Metrics bool
	// Profile, if set, is where a CPU profile of the burst is written, and
	// allocation profiles to Profile+".alloc0" (when it starts) and
	// Profile+".alloc" (when it ends): `go tool pprof -base FILE.alloc0
	// FILE.alloc` shows what the burst allocated.
	Profile string
	// NoFloor skips measuring the fork/exec floor (2 s), for runs that
	// compare e31 with itself.
	NoFloor bool
	// Logger is the logger of the system under measure.
	Logger *slog.Logger
}

// timing is when each step of one job happened, by its events' ce-time.
type timing struct {
	requested, held, started, stopped, returned, released time.Time
	// stopLogged is when the log stored the stop: what lies between the
	// stop and it is its node's publishing, what follows OUTPUT's.
	stopLogged time.Time
	outcome    events.Outcome
}

// Life starts a whole e31 (stack.Start) in a temporary directory and runs
// trivial jobs (/bin/true) through their whole life, with durable storage:
// o.Idle jobs one at a time on an idle pool (the latency of each step),
// then o.Jobs at once (throughput and latency under load). In the same run
// it measures the floor: plain fork/exec of /bin/true from Go, as many at
// once as there are cores. It writes its figures to out, the last line one
// machine-readable summary ("bench jobs=… jobs_per_s=…"). A job that did not
// succeed makes its error wrap ErrFailed, after the summary.
func Life(ctx context.Context, out io.Writer, o LifeOptions) error {
	_, err := life(ctx, out, o)
	return err
}

// lifeResult is what one run of life measured.
type lifeResult struct {
	perSec float64
	failed int
	// cpuPerJob is this process's CPU time (every service and the
	// embedded server, not the jobs) over the burst, per job: on a machine
	// others share, steadier than the rate, which waits on them.
	cpuPerJob time.Duration
	// writesPerJob is the messages every stream stored over the burst
	// (each one written to disk with --sync always), per job.
	writesPerJob float64
}

// life is Life, returning the burst's throughput as well.
func life(ctx context.Context, out io.Writer, o LifeOptions) (_ lifeResult, err error) {
	dir, err := os.MkdirTemp("", "e31-bench-")
	if err != nil {
		return lifeResult{}, err
	}
	if !o.Keep {
		defer os.RemoveAll(dir)
	}
	cfg := stack.Config{Dir: dir, Listen: "127.0.0.1:0", Nodes: o.Nodes, Sync: broker.Sync(o.Sync), Logger: o.Logger,
		Node: run.Config{CPU: float64(runtime.NumCPU()), MemoryBytes: 16 << 30, DiskBytes: 64 << 30, ExecutorKind: o.Executor, Grace: time.Second}}
	var watched []prometheus.Collector
	if o.Metrics {
		handlers := metrics.NewHandlers()
		cfg.Handlers = handlers
		watched = append(watched, handlers)
		var mu sync.Mutex
		cfg.Scheduler = func(string) rent.Observer {
			s := metrics.NewScheduler()
			mu.Lock()
			watched = append(watched, s)
			mu.Unlock()
			return s
		}
	}
	sys, err := stack.Start(ctx, cfg)
	if err != nil {
		return lifeResult{}, err
	}
	defer func() {
		if serr := sys.Stop(); serr != nil && err == nil {
			err = fmt.Errorf("bench: stop e31: %w", serr)
		}
	}()
	nc, err := sys.Connect(stack.Operator, "e31-bench")
	if err != nil {
		return lifeResult{}, err
	}
	defer nc.Close()
	js, err := connect.Ready(ctx, nc)
	if err != nil {
		return lifeResult{}, err
	}
	fmt.Fprintf(out, "e31 bench: %d node(s), %d cores, sync=%s, executor=%s, in %s\n", o.Nodes, runtime.NumCPU(), o.Sync, o.Executor, dir)

	if o.Metrics {
		stop, err := scrape(ctx, js, o.Logger, watched)
		if err != nil {
			return lifeResult{}, err
		}
		defer stop()
	}
	w := newWatcher()
	wctx, stopWatching := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		_ = w.follow(wctx, js)
	}()
	defer func() {
		stopWatching()
		<-watching
	}()
	pub := bus.NewPublisher(js, "e31/bench", nil)
	spec := events.JobSpec{Name: "bench", Work: events.Work{Command: []string{"/bin/true"}},
		Request: events.Request{CPU: 0.01, MemoryBytes: 64 << 20, DiskBytes: 16 << 20, LimitSeconds: 60}}

	// Idle pool: one at a time.
	var idle []*timing
	for i := 0; i < o.Idle; i++ {
		id := uuid.Must(uuid.NewV7()).String()
		done := w.expect(id)
		if _, err := pub.Append(ctx, id, &events.JobRequested{Submitter: "bench", Spec: spec}, bus.ExpectLast(0)); err != nil {
			return lifeResult{}, fmt.Errorf("bench: submit: %w", err)
		}
		select {
		case t := <-done:
			idle = append(idle, t)
		case <-time.After(time.Minute):
			return lifeResult{}, fmt.Errorf("bench: idle job %s did not finish within a minute", id)
		case <-ctx.Done():
			return lifeResult{}, ctx.Err()
		}
	}

	if o.Profile != "" {
		if err := writeAllocs(o.Profile + ".alloc0"); err != nil {
			return lifeResult{}, err
		}
		stopProfile, err := startCPUProfile(o.Profile)
		if err != nil {
			return lifeResult{}, err
		}
		defer stopProfile()
	}
	// Burst: everything at once, published in batches.
	writes0, err := streamWrites(ctx, js)
	if err != nil {
		return lifeResult{}, err
	}
	cpu0 := cpuTime()
	ids := make([]string, o.Jobs)
	dones := make([]<-chan *timing, o.Jobs)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
		dones[i] = w.expect(ids[i])
	}
	for start := 0; start < len(ids); start += 512 {
		end := min(start+512, len(ids))
		batch := make([]bus.Pending, 0, end-start)
		for _, id := range ids[start:end] {
			p := bus.Pending{Subject: id, Event: &events.JobRequested{Submitter: "bench", Spec: spec}, ExpectSet: true}
			if trace.Enabled() {
				// Traced as `e31 submit` would be, so that tracing on
				// costs what it costs for a submitted job.
				jctx, span := trace.Tracer().Start(ctx, "submit")
				p.Trace = trace.Of(jctx)
				span.End()
			}
			batch = append(batch, p)
		}
		_, errs := pub.AppendBatch(ctx, batch)
		for _, err := range errs {
			if err != nil {
				return lifeResult{}, fmt.Errorf("bench: submit: %w", err)
			}
		}
	}
	burst := make([]*timing, 0, o.Jobs)
	deadline := time.After(time.Duration(o.Jobs)*50*time.Millisecond + time.Minute)
	for _, d := range dones {
		select {
		case t := <-d:
			burst = append(burst, t)
		case <-deadline:
			return lifeResult{}, fmt.Errorf("bench: only %d of %d jobs finished in time", len(burst), o.Jobs)
		case <-ctx.Done():
			return lifeResult{}, ctx.Err()
		}
	}
	failed := 0
	first, last := burst[0].requested, burst[0].released
	for _, t := range burst {
		if t.outcome != events.Succeeded {
			failed++
		}
		if t.requested.Before(first) {
			first = t.requested
		}
		if t.released.After(last) {
			last = t.released
		}
	}
	if o.Profile != "" {
		if err := writeAllocs(o.Profile + ".alloc"); err != nil {
			return lifeResult{}, err
		}
	}
	perSec := float64(len(burst)) / last.Sub(first).Seconds()
	res := lifeResult{perSec: perSec, failed: failed, cpuPerJob: (cpuTime() - cpu0) / time.Duration(len(burst))}
	writes1, err := streamWrites(ctx, js)
	if err != nil {
		return lifeResult{}, err
	}
	var all uint64
	var each []string
	for name, n := range writes1 {
		if d := n - writes0[name]; d > 0 {
			all += d
			each = append(each, fmt.Sprintf("%s %.2f", name, float64(d)/float64(len(burst))))
		}
	}
	sort.Strings(each)
	res.writesPerJob = float64(all) / float64(len(burst))

	idleHeld, idleStart, idleRel := latencies(idle)
	bHeld, bStart, bRel := latencies(burst)
	fmt.Fprintf(out, "idle pool (%d jobs one at a time):  submit→held p50 %.2f ms p99 %.2f | submit→started p50 %.2f ms p99 %.2f | submit→released p50 %.2f ms p99 %.2f\n",
		len(idle), pct(idleHeld, 50), pct(idleHeld, 99), pct(idleStart, 50), pct(idleStart, 99), pct(idleRel, 50), pct(idleRel, 99))
	fmt.Fprintf(out, "burst (%d jobs at once):            %.1f jobs/s | submit→held p50 %.0f ms p99 %.0f | submit→started p50 %.0f ms p99 %.0f | submit→released p50 %.0f ms p99 %.0f | %d not succeeded\n",
		len(burst), perSec, pct(bHeld, 50), pct(bHeld, 99), pct(bStart, 50), pct(bStart, 99), pct(bRel, 50), pct(bRel, 99), failed)
	hs, ss, sr, rr, sl := steps(burst)
	fmt.Fprintf(out, "burst, from hold to release (the slot held all along), median of each step: held→started %.1f ms, started→stopped %.1f ms, stopped→returned %.1f ms (the stop logged after %.1f ms), returned→released %.1f ms\n", hs, ss, sr, sl, rr)
	fmt.Fprintf(out, "writes a job, every stream (each to disk with --sync always): %.2f: %s\n", res.writesPerJob, strings.Join(each, ", "))
	if o.NoFloor {
		if failed > 0 {
			return res, fmt.Errorf("%w: %d of %d jobs did not succeed", ErrFailed, failed, len(burst))
		}
		return res, nil
	}
	floor := forkFloor(2 * time.Second)
	fmt.Fprintf(out, "floor: plain fork/exec of /bin/true, %d at once: %.0f/s\n", runtime.NumCPU(), floor)
	nodeFloor, err := executorFloor(ctx, o.Executor, spec.Request, 2*time.Second)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(out, "the node's executor alone (%s): /bin/true prepared, run and released as RUN does each attempt, %d at once: %.0f/s\n",
		o.Executor, runtime.NumCPU(), nodeFloor)
	// cpu_per_job_ms is e31's own CPU (every service and the embedded
	// server, not the jobs) per job of the burst: steadier than the rate
	// on a machine others share.
	fmt.Fprintf(out, "bench jobs=%d jobs_per_s=%.1f floor_per_s=%.0f ratio=%.3f start_p50_ms=%.2f start_p99_ms=%.2f released_p50_ms=%.2f burst_start_p50_ms=%.0f burst_released_p99_ms=%.0f sync=%s executor=%s failed=%d cpu_per_job_ms=%.2f executor_floor_per_s=%.0f executor_ratio=%.3f writes_per_job=%.2f\n",
		len(burst), perSec, floor, perSec/floor, pct(idleStart, 50), pct(idleStart, 99), pct(idleRel, 50), pct(bStart, 50), pct(bRel, 99), o.Sync, o.Executor, failed,
		float64(res.cpuPerJob.Microseconds())/1000, nodeFloor, perSec/nodeFloor, res.writesPerJob)
	if failed > 0 {
		return res, fmt.Errorf("%w: %d of %d jobs did not succeed", ErrFailed, failed, len(burst))
	}
	return res, nil
}

// watcher follows the log and reports each job's timing when it is over.
type watcher struct {
	mu      sync.Mutex
	timings map[string]*timing
	waiters map[string]chan *timing
}

func newWatcher() *watcher {
	return &watcher{timings: map[string]*timing{}, waiters: map[string]chan *timing{}}
}

func (w *watcher) expect(id string) <-chan *timing {
	ch := make(chan *timing, 1)
	w.mu.Lock()
	w.waiters[id] = ch
	w.mu.Unlock()
	return ch
}

func (w *watcher) follow(ctx context.Context, js jetstream.JetStream) error {
	cons, err := js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{
		// From the start: the log is the bench's own, and a consumer made
		// while the first jobs are submitted would miss their requests.
		FilterSubjects: []string{events.JobSubjects}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return err
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return err
	}
	defer iter.Stop()
	context.AfterFunc(ctx, iter.Stop)
	for {
		m, err := iter.Next()
		if err != nil {
			return err
		}
		env, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			continue
		}
		w.mu.Lock()
		t := w.timings[env.Subject]
		if t == nil {
			t = &timing{}
			w.timings[env.Subject] = t
		}
		switch e := env.Event.(type) {
		case *events.JobRequested:
			t.requested = env.Time
		case *events.ComputeHeld:
			t.held = env.Time
		case *events.RunStarted:
			t.started = env.Time
		case *events.RunStopped:
			t.stopped = env.Time
			if md, err := m.Metadata(); err == nil {
				t.stopLogged = md.Timestamp
			}
		case *events.OutputReturned:
			t.returned = env.Time
		case *events.JobRejected:
			t.outcome, t.released = events.Rejected, env.Time
		case *events.ComputeReleased:
			t.outcome, t.released = e.Outcome, env.Time
		}
		if events.Terminal(env.Event) {
			if ch := w.waiters[env.Subject]; ch != nil {
				ch <- t
				delete(w.waiters, env.Subject)
			}
			delete(w.timings, env.Subject)
		}
		w.mu.Unlock()
	}
}

// steps is the median time of each step after the hold, in ms: where a
// job's time on its node goes, from its hold to its release (the slot is
// the job's all that time). logged is the median time from a stop to
// its storing in the log, a part of ret.
func steps(ts []*timing) (run, stop, ret, rel, logged float64) {
	var a, b, c, d, e []float64
	ms := func(from, to time.Time) float64 { return float64(to.Sub(from).Microseconds()) / 1000 }
	for _, t := range ts {
		if t.held.IsZero() || t.started.IsZero() || t.stopped.IsZero() || t.returned.IsZero() {
			continue
		}
		a, b, c, d = append(a, ms(t.held, t.started)), append(b, ms(t.started, t.stopped)), append(c, ms(t.stopped, t.returned)), append(d, ms(t.returned, t.released))
		if !t.stopLogged.IsZero() {
			e = append(e, ms(t.stopped, t.stopLogged))
		}
	}
	return pct(a, 50), pct(b, 50), pct(c, 50), pct(d, 50), pct(e, 50)
}

func latencies(ts []*timing) (held, started, released []float64) {
	for _, t := range ts {
		ms := func(x time.Time) float64 { return float64(x.Sub(t.requested).Microseconds()) / 1000 }
		if !t.held.IsZero() {
			held = append(held, ms(t.held))
		}
		if !t.started.IsZero() {
			started = append(started, ms(t.started))
		}
		released = append(released, ms(t.released))
	}
	return held, started, released
}

func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// forkFloor is how many plain fork/execs of /bin/true per second Go manages
// here, one per core at a time: the floor no job system can beat.
func forkFloor(d time.Duration) float64 {
	n, _ := perCore(context.Background(), d, func(int, int) (bool, error) {
		return exec.Command("/bin/true").Run() == nil, nil
	})
	return n
}

// executorFloor is how many trivial jobs a second the node's executor
// (run.OpenExecutor of kind) runs here on its own, one per core at a
// time: each /bin/true prepared, run and released as RUN does an attempt
// (for the sandbox: its workspace, its disk quota, its namespaces and
// cgroup), with no event, service or broker. The fork/exec floor is the
// machine's; this one is what a job costs before e31 adds anything, and
// the two moved apart sixfold between machines of one kind.
func executorFloor(ctx context.Context, kind string, req events.Request, d time.Duration) (float64, error) {
	root, err := os.MkdirTemp("", "e31-floor-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(root)
	ex, err := run.OpenExecutor(kind, root, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		return 0, fmt.Errorf("bench: the executor's floor: %w", err)
	}
	if c, ok := ex.(io.Closer); ok {
		defer c.Close()
	}
	return perCore(ctx, d, func(w, i int) (bool, error) {
		job, err := ex.Prepare(ctx, executor.Spec{JobID: fmt.Sprintf("floor-%d-%d", w, i), Attempt: 1, Submitter: "bench",
			Command: []string{"/bin/true"}, CPU: req.CPU, MemoryBytes: req.MemoryBytes, DiskBytes: req.DiskBytes,
			Limit: time.Duration(req.LimitSeconds * float64(time.Second))})
		if err != nil {
			return false, fmt.Errorf("bench: the executor's floor: prepare: %w", err)
		}
		r, err := job.Run(ctx)
		if rerr := job.Release(); err == nil {
			err = rerr
		}
		if err != nil {
			return false, fmt.Errorf("bench: the executor's floor: %w", err)
		}
		return r.Outcome == events.Succeeded, nil
	})
}

// perCore calls one, as worker w's i-th call, on every core at once for
// d, and returns how many calls a second succeeded, or the first error:
// a worker that fails stops, the others stop at once after it.
func perCore(ctx context.Context, d time.Duration, one func(w, i int) (bool, error)) (float64, error) {
	var n atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	start := time.Now()
	deadline := start.Add(d)
	for w := range runtime.NumCPU() {
		g.Go(func() error {
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				ok, err := one(w, i)
				if err != nil {
					return err
				}
				if ok {
					n.Add(1)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

// scrapeEvery is deploy/prometheus/prometheus.yml's scrape_interval.
const scrapeEvery = 5 * time.Second

// scrape follows the log's figures and gathers every metric every
// scrapeEvery, the work an operator's Prometheus causes, until stop is
// called.
func scrape(ctx context.Context, js jetstream.JetStream, log *slog.Logger, cs []prometheus.Collector) (stop func(), err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	logs := metrics.NewLogCollector(js, log)
	reg, err := metrics.NewRegistry(append(cs, logs)...)
	if err != nil {
		return nil, fmt.Errorf("bench: metrics: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return logs.Run(ctx) })
	g.Go(func() error {
		tick := time.NewTicker(scrapeEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
				if _, err := reg.Gather(); err != nil {
					return fmt.Errorf("bench: gather metrics: %w", err)
				}
			}
		}
	})
	return func() { cancel(); _ = g.Wait() }, nil
}

// streamWrites is the last sequence of every stream: what each has stored
// since it was made, so that two readings give the writes between them.
func streamWrites(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("bench: list the streams: %w", err)
	}
	return out, nil
}
