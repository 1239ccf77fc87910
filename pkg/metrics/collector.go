package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/e31net/e31/pkg/events"
)

// The metrics' descriptions: names, help and labels are part of the public
// interface (dashboards and alerts rely on them), so they only grow.
var (
	descJobs = prometheus.NewDesc("e31_jobs",
		"Jobs in each state, as e31 status names them; released, rejected and cancelled count every job that ended so.",
		[]string{"state"}, nil)
	descFinished = prometheus.NewDesc("e31_jobs_finished_total",
		"Jobs over, by final outcome (the hold record's outcome).", []string{"outcome"}, nil)
	descWait = prometheus.NewDesc("e31_job_wait_seconds",
		"Time from a job's submission (or the release of an attempt whose node was lost) to its hold, by the events' ce-time.", nil, nil)
	descStart = prometheus.NewDesc("e31_job_start_seconds",
		"Time from an attempt's hold to its start on the node.", nil, nil)
	descRelease = prometheus.NewDesc("e31_job_release_seconds",
		"Time from an attempt's stop (or the loss of its node) to the release of its compute.", nil, nil)
	descHeldSeconds = prometheus.NewDesc("e31_held_seconds_total",
		"Seconds compute was held, summed over released attempts (the meter, as e31 ledger --totals bills it).", []string{"submitter"}, nil)
	descHeldCPU = prometheus.NewDesc("e31_held_cpu_core_seconds_total",
		"CPU cores held times the seconds they were held, over released attempts.", []string{"submitter"}, nil)
	descHeldMemory = prometheus.NewDesc("e31_held_memory_gib_seconds_total",
		"GiB of memory held times the seconds it was held, over released attempts.", []string{"submitter"}, nil)
	descHeldGPU = prometheus.NewDesc("e31_held_gpu_seconds_total",
		"GPUs held times the seconds they were held, over released attempts.", []string{"submitter"}, nil)
	descCapacity = prometheus.NewDesc("e31_node_capacity",
		"What each node in the pool offers, as it announced it.", []string{"node", "resource", "unit"}, nil)
	descHeld = prometheus.NewDesc("e31_node_held",
		"What is held on each node now, by attempts not yet released.", []string{"node", "resource", "unit"}, nil)
	descNodes = prometheus.NewDesc("e31_nodes",
		"Nodes that announced themselves, up or lost, by the isolation they announced.", []string{"state", "isolation"}, nil)
	descEvents = prometheus.NewDesc("e31_events_total",
		"Messages read from the log, by ce-type; unknown and undecodable for those that are not events this version folds.", []string{"type"}, nil)
	descApplied = prometheus.NewDesc("e31_log_applied_sequence",
		"The last stream sequence of the log folded into these figures.", nil, nil)
	descOverrun = prometheus.NewDesc("e31_hold_max_overrun_seconds",
		"The longest any hold still open has outlived its job's limit, by the clock of this process (0 when none has): the meter runs on a hold that should be over.", nil, nil)
)

// NewRegistry returns a registry with the Go runtime and process collectors
// and cs: what every e31 process serves on /metrics.
func NewRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs = append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, cs...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return reg, nil
}

// LogCollector follows the log into a Projection and is a Prometheus
// collector of its figures. Collect and Ready may be called concurrently
// with Run and with each other.
type LogCollector struct {
	js  jetstream.JetStream
	log *slog.Logger

	mu       sync.Mutex
	p        *Projection
	caughtUp bool
	pending  uint64 // messages not yet read, as of the last one read
	err      error  // why the last attempt to follow stopped
}

// NewLogCollector returns a collector of the log that js reads; Run follows it.
func NewLogCollector(js jetstream.JetStream, log *slog.Logger) *LogCollector {
	return &LogCollector{js: js, log: log.With("component", "metrics"), p: NewProjection()}
}

// ErrNotCaughtUp is why a collector is not ready: it has not yet folded in
// the log as it was when it started to read.
var ErrNotCaughtUp = errors.New("metrics: not caught up with the log")

// retryAfter is how long Run waits before it reads the log again after the
// reading stopped (the server restarting, a lost connection).
const retryAfter = time.Second

// Run follows the log from its first event, or from after the last one
// folded in, until ctx ends. A failure to read is logged and retried: the
// figures stand still meanwhile, and Ready says why.
func (c *LogCollector) Run(ctx context.Context) error {
	for {
		err := c.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		c.log.Warn("reading the log stopped; reading it again", "err", err, "after", retryAfter)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retryAfter):
		}
	}
}

// follow reads the log with an ordered consumer from after the last
// sequence applied, until ctx ends or the reading fails.
func (c *LogCollector) follow(ctx context.Context) error {
	c.mu.Lock()
	from := c.p.Applied() + 1
	c.mu.Unlock()
	// No filter: the stream holds job and node events only, and the
	// figures need both.
	cfg := jetstream.OrderedConsumerConfig{}
	if from > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from
	}
	cons, err := c.js.OrderedConsumer(ctx, events.Stream, cfg)
	if err != nil {
		return fmt.Errorf("read the log from #%d: %w", from, err)
	}
	c.mu.Lock()
	c.err = nil
	c.pending = cons.CachedInfo().NumPending
	if c.pending == 0 {
		c.caughtUp = true
	}
	c.mu.Unlock()
	iter, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return fmt.Errorf("read the log from #%d: %w", from, err)
	}
	defer iter.Stop()
	stop := context.AfterFunc(ctx, iter.Stop)
	defer stop()
	for {
		msg, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read the log: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("read the log: %w", err)
		}
		env, derr := events.Decode(msg.Subject(), msg.Headers(), msg.Data())
		c.mu.Lock()
		if derr != nil {
			c.p.Skip(meta.Sequence.Stream, events.IsUnknownType(derr))
		} else {
			env.Seq = meta.Sequence.Stream
			c.p.Apply(env)
		}
		c.pending = meta.NumPending
		if meta.NumPending == 0 && !c.caughtUp {
			c.caughtUp = true
			c.log.Info("metrics caught up with the log", "seq", meta.Sequence.Stream, "live_jobs", c.p.Live())
		}
		c.mu.Unlock()
		if derr != nil && !events.IsUnknownType(derr) {
			c.log.Debug("skipped a message that is not an event", "seq", meta.Sequence.Stream, "err", derr)
		}
	}
}

// Ready says nil once the collector has folded in the log as it was when it
// started, and it is connected; otherwise why not, in words for an
// operator. It does not wait.
func (c *LogCollector) Ready(context.Context) error {
	if st := c.js.Conn().Status(); st != nats.CONNECTED {
		return fmt.Errorf("metrics: not connected to NATS (%s)", st)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return fmt.Errorf("metrics: cannot read the log: %w", c.err)
	}
	if !c.caughtUp {
		return fmt.Errorf("%w: at #%d, %d messages to go", ErrNotCaughtUp, c.p.Applied(), c.pending)
	}
	return nil
}

// Figures returns the figures as they are now.
func (c *LogCollector) Figures() Figures {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p.Figures()
}

// Describe sends the descriptions of every metric Collect sends.
func (c *LogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descFinished, descWait, descStart, descRelease, descHeldSeconds,
		descHeldCPU, descHeldMemory, descHeldGPU, descCapacity, descHeld, descNodes, descEvents, descApplied, descOverrun} {
		ch <- d
	}
}

// Collect sends the figures as they are now. It copies them under the lock
// and builds the metrics after, so that a scrape holds up the log's reading
// for no longer than the copy.
func (c *LogCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	f, overrun := c.p.Figures(), c.p.Overrun(time.Now())
	c.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	for _, s := range States {
		gauge(descJobs, float64(f.Jobs[s]), s)
	}
	outcomes := map[events.Outcome]int{}
	for _, o := range Outcomes {
		outcomes[o] = 0
	}
	for o, n := range f.Finished {
		outcomes[o] = n
	}
	for o, n := range outcomes {
		counter(descFinished, float64(n), string(o))
	}
	for d, h := range map[*prometheus.Desc]Histogram{descWait: f.Wait, descStart: f.Start, descRelease: f.Release} {
		ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum, h.Cumulative())
	}
	for s, m := range f.Meter {
		counter(descHeldSeconds, m.HeldSeconds, s)
		counter(descHeldCPU, m.CPUCoreSeconds, s)
		counter(descHeldMemory, m.MemoryGiBSeconds, s)
		counter(descHeldGPU, m.GPUSeconds, s)
	}
	nodes := map[[2]string]int{}
	for name, n := range f.Nodes {
		if n.Announced {
			state := "up"
			if !n.Up {
				state = "lost"
			}
			nodes[[2]string{state, n.Isolation}]++
			// Both states of every isolation are told, 0 or not, so that
			// a node lost, found and lost again is a series that goes
			// 0, 1, 0, 1, rather than one that vanishes and comes back
			// the same, which an alert on its change would miss.
			for _, other := range []string{"up", "lost"} {
				nodes[[2]string{other, n.Isolation}] += 0
			}
			if n.Up {
				resources(n.Capacity, func(r, unit string, v float64) { gauge(descCapacity, v, name, r, unit) })
			}
		}
		resources(n.Held, func(r, unit string, v float64) { gauge(descHeld, v, name, r, unit) })
	}
	for k, n := range nodes {
		gauge(descNodes, float64(n), k[0], k[1])
	}
	for t, n := range f.Events {
		counter(descEvents, float64(n), t)
	}
	gauge(descApplied, float64(f.Applied))
	gauge(descOverrun, overrun.Seconds())
}

// resources calls fn with each resource of r, by the names and units of
// kube-state-metrics.
func resources(r Resources, fn func(resource, unit string, v float64)) {
	fn("cpu", "core", r.CPU)
	fn("memory", "byte", float64(r.MemoryBytes))
	fn("gpu", "gpu", float64(r.GPU))
	fn("disk", "byte", float64(r.DiskBytes))
}
