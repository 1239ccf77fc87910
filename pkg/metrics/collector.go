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

	"github.com/e31net/e31/pkg/bus"
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
		"Seconds compute was held, summed over released attempts not lost with their node (the meter, as e31 ledger --totals bills it).", []string{"submitter"}, nil)
	descHeldCPU = prometheus.NewDesc("e31_held_cpu_core_seconds_total",
		"CPU cores held times the seconds they were held, over released attempts not lost with their node.", []string{"submitter"}, nil)
	descHeldMemory = prometheus.NewDesc("e31_held_memory_gib_seconds_total",
		"GiB of memory held times the seconds it was held, over released attempts.", []string{"submitter"}, nil)
	descHeldGPU = prometheus.NewDesc("e31_held_gpu_seconds_total",
		"GPUs held times the seconds they were held, over released attempts.", []string{"submitter"}, nil)
	descLostSeconds = prometheus.NewDesc("e31_lost_seconds_total",
		"Seconds compute was held by attempts released node_lost: the pool's loss, not billed (e31 ledger --totals' lost_seconds).", []string{"submitter"}, nil)
	descCapacity = prometheus.NewDesc("e31_node_capacity",
		"What each node in the pool offers, as it announced it.", []string{"node", "resource", "unit"}, nil)
	descHeld = prometheus.NewDesc("e31_node_held",
		"What is held on each node now, by attempts not yet released.", []string{"node", "resource", "unit"}, nil)
	descWithdrawn = prometheus.NewDesc("e31_node_gpus_withdrawn",
		"GPUs each node has withdrawn (compute processes left on them after a job, or its driver no longer lists them) and not restored: they take no job.", []string{"node"}, nil)
	descNodes = prometheus.NewDesc("e31_nodes",
		"Nodes that announced themselves, up or lost, by the isolation they announced.", []string{"state", "isolation"}, nil)
	descEvents = prometheus.NewDesc("e31_events_total",
		"Messages read from the log, by ce-type; unknown and undecodable for those that are not events this version folds, set_aside for a node's start or stop of an attempt another node held.", []string{"type"}, nil)
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
	js   jetstream.JetStream
	log  *slog.Logger
	tail *bus.Tail

	mu sync.Mutex
	p  *Projection
}

// NewLogCollector returns a collector of the log that js reads; Run follows it.
func NewLogCollector(js jetstream.JetStream, log *slog.Logger) *LogCollector {
	log = log.With("component", "metrics")
	c := &LogCollector{js: js, log: log, p: NewProjection()}
	// No filter: the stream holds job and node events only, and the
	// figures need both. A failure to read is retried: the figures stand
	// still meanwhile, and Ready says why.
	c.tail = bus.NewTail(js, bus.TailOptions{Again: true, Logger: log, CaughtUp: func(context.Context) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.log.Info("metrics caught up with the log", "seq", c.p.Applied(), "live_jobs", c.p.Live())
	}})
	return c
}

// ErrNotCaughtUp is why a collector is not ready: it has not yet folded in
// the log as it was when it started to read.
var ErrNotCaughtUp = errors.New("metrics: not caught up with the log")

// Run follows the log from its first event until ctx ends.
func (c *LogCollector) Run(ctx context.Context) error {
	return c.tail.Run(ctx, c.apply)
}

// apply folds read messages in; those that are not events are counted.
func (c *LogCollector) apply(_ context.Context, msgs []*jetstream.RawStreamMsg) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			c.p.Skip(m.Sequence, events.IsUnknownType(err))
			if !events.IsUnknownType(err) {
				c.log.Debug("skipped a message that is not an event", "seq", m.Sequence, "err", err)
			}
			continue
		}
		env.Seq = m.Sequence
		c.p.Apply(env)
	}
	return nil
}

// Ready says nil once the collector has folded in the log as it was when it
// started, and it is connected; otherwise why not, in words for an
// operator. It does not wait.
func (c *LogCollector) Ready(context.Context) error {
	if st := c.js.Conn().Status(); st != nats.CONNECTED {
		return fmt.Errorf("metrics: not connected to NATS (%s)", st)
	}
	applied, pending, err := c.tail.Status()
	if err != nil {
		return fmt.Errorf("metrics: cannot read the log: %w", err)
	}
	if !c.tail.Live() {
		return fmt.Errorf("%w: at #%d, %d messages to go", ErrNotCaughtUp, applied, pending)
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
		descHeldCPU, descHeldMemory, descHeldGPU, descLostSeconds, descCapacity, descHeld, descNodes, descWithdrawn, descEvents, descApplied, descOverrun} {
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
		counter(descLostSeconds, m.LostSeconds, s)
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
			if n.Capacity.GPU > 0 || len(n.Withdrawn) > 0 {
				gauge(descWithdrawn, float64(len(n.Withdrawn)), name)
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
