package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
)

type benchOptions struct {
	jobs     int
	idle     int
	sync     string
	executor string
	nodes    int
	keep     bool
	profile  string
}

func benchCmd(a *app) *cobra.Command {
	o := benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure jobs per second through the whole life of a job on this machine",
		Long: `Start e31 dev in a temporary directory and run trivial jobs (/bin/true)
through all five steps, with durable storage:

  idle:  jobs submitted one at a time, each after the last was released: the
         latency of each step on an idle pool (start_p50_ms, released_p50_ms);
  burst: --jobs jobs submitted at once: throughput (jobs_per_s) and latency
         under load (burst_*).

In the same run it measures the floor: plain fork/exec of /bin/true from Go,
as many at once as there are cores. The last line is one machine-readable
summary. BENCH_N sets --jobs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.jobs <= 0 {
				o.jobs = a.env.BenchN
			}
			if o.jobs <= 0 {
				o.jobs = 2000
			}
			return runBench(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.jobs, "jobs", 0, "jobs in the burst (default $BENCH_N or 2000)")
	f.IntVar(&o.idle, "idle", 100, "jobs submitted one at a time on the idle pool")
	f.StringVar(&o.sync, "sync", "always", "event store durability: always or interval")
	f.StringVar(&o.executor, "executor", "auto", "sandbox, process or auto")
	f.IntVar(&o.nodes, "nodes", 1, "compute nodes")
	f.BoolVar(&o.keep, "keep", false, "keep the temporary directory")
	f.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the burst to this file")
	cmd.AddCommand(benchSchedulerCmd(a))
	cmd.AddCommand(benchStageCmd(a))
	cmd.AddCommand(benchLedgerCmd(a))
	return cmd
}

// timing is when each step of one job happened, by its events' ce-time.
type timing struct {
	requested, held, started, released time.Time
	outcome                            events.Outcome
}

func runBench(ctx context.Context, a *app, o benchOptions) error {
	dir, err := os.MkdirTemp("", "e31-bench-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	quiet := *a
	quiet.log = a.log.WithGroup("dev")
	if a.logLevel == "" && a.env.Log == "" {
		quiet.logLevel = "warn"
		_ = quiet.setupLog()
	}
	sys, err := startDev(ctx, &quiet, devOptions{dir: dir, listen: "127.0.0.1:0", nodes: o.nodes, nodeCPU: float64(runtime.NumCPU()),
		nodeMemory: "16GiB", nodeDisk: "64GiB", sync: o.sync, executor: o.executor, grace: time.Second})
	if err != nil {
		return err
	}
	defer sys.stop()
	nc, err := sys.connect(operator, "e31-bench", a.log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := connect.Ready(ctx, nc)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "e31 bench: %d node(s), %d cores, sync=%s, executor=%s, in %s\n", o.nodes, runtime.NumCPU(), o.sync, o.executor, dir)

	w := newWatcher()
	go func() { _ = w.follow(ctx, js) }()
	pub := bus.NewPublisher(js, "e31/bench", nil)
	spec := events.JobSpec{Name: "bench", Work: events.Work{Command: []string{"/bin/true"}},
		Request: events.Request{CPU: 0.01, MemoryBytes: 64 << 20, DiskBytes: 16 << 20, LimitSeconds: 60}}

	// Idle pool: one at a time.
	var idle []*timing
	for i := 0; i < o.idle; i++ {
		id := uuid.Must(uuid.NewV7()).String()
		done := w.expect(id)
		if _, err := pub.Append(ctx, id, &events.JobRequested{Submitter: "bench", Spec: spec}, bus.ExpectLast(0)); err != nil {
			return fmt.Errorf("bench: submit: %w", err)
		}
		select {
		case t := <-done:
			idle = append(idle, t)
		case <-time.After(time.Minute):
			return fmt.Errorf("bench: idle job %s did not finish within a minute", id)
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	if o.profile != "" {
		f, err := os.Create(o.profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// Burst: everything at once, published in batches.
	ids := make([]string, o.jobs)
	dones := make([]<-chan *timing, o.jobs)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7()).String()
		dones[i] = w.expect(ids[i])
	}
	for start := 0; start < len(ids); start += 512 {
		end := min(start+512, len(ids))
		batch := make([]bus.Pending, 0, end-start)
		for _, id := range ids[start:end] {
			batch = append(batch, bus.Pending{Subject: id, Event: &events.JobRequested{Submitter: "bench", Spec: spec}, ExpectSet: true})
		}
		_, errs := pub.AppendBatch(ctx, batch)
		for _, err := range errs {
			if err != nil {
				return fmt.Errorf("bench: submit: %w", err)
			}
		}
	}
	burst := make([]*timing, 0, o.jobs)
	deadline := time.After(time.Duration(o.jobs)*50*time.Millisecond + time.Minute)
	for _, d := range dones {
		select {
		case t := <-d:
			burst = append(burst, t)
		case <-deadline:
			return fmt.Errorf("bench: only %d of %d jobs finished in time", len(burst), o.jobs)
		case <-ctx.Done():
			return ctx.Err()
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
	perSec := float64(len(burst)) / last.Sub(first).Seconds()
	floor := forkFloor(2 * time.Second)

	idleHeld, idleStart, idleRel := latencies(idle)
	bHeld, bStart, bRel := latencies(burst)
	fmt.Fprintf(a.out, "idle pool (%d jobs one at a time):  submit→held p50 %.2f ms p99 %.2f | submit→started p50 %.2f ms p99 %.2f | submit→released p50 %.2f ms p99 %.2f\n",
		len(idle), pct(idleHeld, 50), pct(idleHeld, 99), pct(idleStart, 50), pct(idleStart, 99), pct(idleRel, 50), pct(idleRel, 99))
	fmt.Fprintf(a.out, "burst (%d jobs at once):            %.1f jobs/s | submit→held p50 %.0f ms p99 %.0f | submit→started p50 %.0f ms p99 %.0f | submit→released p50 %.0f ms p99 %.0f | %d not succeeded\n",
		len(burst), perSec, pct(bHeld, 50), pct(bHeld, 99), pct(bStart, 50), pct(bStart, 99), pct(bRel, 50), pct(bRel, 99), failed)
	fmt.Fprintf(a.out, "floor: plain fork/exec of /bin/true, %d at once: %.0f/s\n", runtime.NumCPU(), floor)
	fmt.Fprintf(a.out, "bench jobs=%d jobs_per_s=%.1f floor_per_s=%.0f ratio=%.3f start_p50_ms=%.2f start_p99_ms=%.2f released_p50_ms=%.2f burst_start_p50_ms=%.0f burst_released_p99_ms=%.0f sync=%s executor=%s failed=%d\n",
		len(burst), perSec, floor, perSec/floor, pct(idleStart, 50), pct(idleStart, 99), pct(idleRel, 50), pct(bStart, 50), pct(bRel, 99), o.sync, o.executor, failed)
	if failed > 0 {
		return silent(exitFailed)
	}
	return nil
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
		FilterSubjects: []string{events.JobSubjects}, DeliverPolicy: jetstream.DeliverNewPolicy})
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
	var n atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := exec.Command("/bin/true").Run(); err == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}
