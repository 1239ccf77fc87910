package metrics

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/e31net/e31/pkg/bus"
)

// What the services tell as they work, rather than what the log says. The
// services do not import Prometheus: pkg/bus and RENT call small interfaces
// these types satisfy, and cmd/e31 registers them with the process's
// registry.

// Reasons of e31_handler_errors_total: a closed set, so that an error's
// text never becomes a label.
const (
	// ReasonTransient: the handler failed for a reason that passes (the
	// server, a conflict); the event is delivered again.
	ReasonTransient = "transient"
	// ReasonPermanent: the event can never be handled; it goes to the
	// poison stream.
	ReasonPermanent = "permanent"
	// ReasonTimeout: the handler ran out of time.
	ReasonTimeout = "timeout"
)

// Handlers counts how each service handles events. Its methods may be
// called concurrently, from every lane of every handler.
// It is the bus.Observer a service process gives its Routers.
type Handlers struct {
	seconds *prometheus.HistogramVec
	errs    *prometheus.CounterVec
	poison  *prometheus.CounterVec

	mu        sync.Mutex
	consumers map[Consumer]Consumer // read by Consumers, by all but the name
}

var _ bus.Observer = (*Handlers)(nil)

// Consumer is one durable consumer a service's handler reads.
type Consumer struct {
	Service, Handler, Stream, Name string
}

// NewHandlers returns the handlers' metrics, to register once per process.
func NewHandlers() *Handlers {
	return &Handlers{
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "e31_handler_seconds",
			Help:    "Time a service's handler took over one event, whatever came of it.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"service", "handler"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "e31_handler_errors_total",
			Help: "Events a service's handler failed on: transient (delivered again), permanent (to the poison stream) or timeout.",
		}, []string{"service", "reason"}),
		poison: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "e31_poison_total",
			Help: "Events a service moved to the poison stream since the process started.",
		}, []string{"service"}),
	}
}

// Handled records that handler of service took took over one event and
// returned err.
func (h *Handlers) Handled(service, handler string, took time.Duration, err error) {
	h.seconds.WithLabelValues(service, handler).Observe(took.Seconds())
	if err != nil {
		h.errs.WithLabelValues(service, Reason(err)).Inc()
	}
}

// Poisoned records that service moved an event to the poison stream.
func (h *Handlers) Poisoned(service string) { h.poison.WithLabelValues(service).Inc() }

// Consuming records that handler of service reads the consumer name of
// stream, for ConsumerCollector to ask the server about: in place of the
// one it read before, if any (a follower that had to read under another
// name while the server of its own was down).
func (h *Handlers) Consuming(service, handler, stream, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.consumers == nil {
		h.consumers = map[Consumer]Consumer{}
	}
	h.consumers[Consumer{Service: service, Handler: handler, Stream: stream}] = Consumer{Service: service, Handler: handler, Stream: stream, Name: name}
}

// Consumers returns the consumers recorded by Consuming, sorted by name.
func (h *Handlers) Consumers() []Consumer {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.SortedFunc(maps.Values(h.consumers), func(a, b Consumer) int {
		return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Name, b.Name))
	})
}

// Reason is the label of e31_handler_errors_total for err.
func Reason(err error) string {
	switch {
	case bus.IsPermanent(err):
		return ReasonPermanent
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	default:
		return ReasonTransient
	}
}

// Describe sends the descriptions of the handlers' metrics.
func (h *Handlers) Describe(ch chan<- *prometheus.Desc) {
	h.seconds.Describe(ch)
	h.errs.Describe(ch)
	h.poison.Describe(ch)
}

// Collect sends the handlers' metrics.
func (h *Handlers) Collect(ch chan<- prometheus.Metric) {
	h.seconds.Collect(ch)
	h.errs.Collect(ch)
	h.poison.Collect(ch)
}

// Scheduler is RENT's own metrics: how long it takes to decide, how many
// jobs wait, and whether this instance is the one that decides. Its methods
// may be called concurrently.
type Scheduler struct {
	decision prometheus.Histogram
	leader   prometheus.Gauge

	mu    sync.Mutex
	queue map[string]int // by submitter, replaced whole by Waiting
}

var descQueue = prometheus.NewDesc("e31_scheduler_queue_depth",
	"Jobs waiting for compute, by submitter, as this instance's scheduler sees them.", []string{"submitter"}, nil)

// NewScheduler returns the scheduler's metrics, to register once per
// process that runs RENT.
func NewScheduler() *Scheduler {
	return &Scheduler{
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "e31_scheduler_decision_seconds",
			Help:    "Time one pass of the scheduler took to decide what to hold.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "e31_scheduler_leader",
			Help: "1 on the scheduler instance that decides, 0 on a standby.",
		}),
	}
}

// Decided records one pass of the scheduler.
func (s *Scheduler) Decided(took time.Duration) { s.decision.Observe(took.Seconds()) }

// Waiting sets the queue to depth, by submitter, at once: a scrape sees
// the queue of one pass, never half of two. A submitter absent from depth
// has nothing waiting. depth is copied.
func (s *Scheduler) Waiting(depth map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = maps.Clone(depth)
}

// Leading records whether this instance decides.
func (s *Scheduler) Leading(leading bool) {
	v := 0.0
	if leading {
		v = 1
	}
	s.leader.Set(v)
}

// Describe sends the descriptions of the scheduler's metrics.
func (s *Scheduler) Describe(ch chan<- *prometheus.Desc) {
	s.decision.Describe(ch)
	ch <- descQueue
	s.leader.Describe(ch)
}

// Collect sends the scheduler's metrics.
func (s *Scheduler) Collect(ch chan<- prometheus.Metric) {
	s.decision.Collect(ch)
	s.leader.Collect(ch)
	s.mu.Lock()
	defer s.mu.Unlock()
	for submitter, n := range s.queue {
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(n), submitter)
	}
}

// Kinds of e31_ledger_mended_total, which only this package writes.
const (
	// mendEntryAhead: an entry of the ledger's bucket past the checkpoint
	// beside it, made again from the log.
	mendEntryAhead = "entry_ahead"
	// mendEventHeld: an event the fold was given for a record that already
	// held it, skipped.
	mendEventHeld = "event_held"
)

// Ledger is the LEDGER's own metrics: what its fold mended. Any count
// above zero says the bucket's rule (every entry as of the checkpoint
// beside it) was broken, which only a fault can do; the records stay
// right, but someone should look. Its methods may be called concurrently.
type Ledger struct {
	mended *prometheus.CounterVec
	// setAside counts nodes' events about attempts other nodes held:
	// not a mend, but a node to look at.
	setAside prometheus.Counter
}

// NewLedger returns the ledger's metrics, to register once per process
// that runs LEDGER. Both kinds are there at 0 from the start, so that an
// increase over a window is seen from the first mend.
func NewLedger() *Ledger {
	l := &Ledger{mended: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "e31_ledger_mended_total",
		Help: "Records the ledger's fold mended since the process started: an entry of its bucket past the checkpoint beside it, made again from the log (entry_ahead), or an event given again for a record that held it, skipped (event_held).",
	}, []string{"kind"}),
		setAside: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "e31_ledger_node_events_set_aside_total",
			Help: "Starts and stops the ledger's fold set aside since the process started because a node other than the one their attempt was held on published them: a node that speaks for jobs it does not hold.",
		})}
	for _, k := range []string{mendEntryAhead, mendEventHeld} {
		l.mended.WithLabelValues(k)
	}
	return l
}

// MadeAgain counts n entries made again from the log.
func (l *Ledger) MadeAgain(n int) { l.mended.WithLabelValues(mendEntryAhead).Add(float64(n)) }

// HeldAlready counts n events skipped as held already.
func (l *Ledger) HeldAlready(n int) { l.mended.WithLabelValues(mendEventHeld).Add(float64(n)) }

// SetAside counts n node's events set aside (see ledger.Observer).
func (l *Ledger) SetAside(n int) { l.setAside.Add(float64(n)) }

// Describe sends the description of the ledger's metrics.
func (l *Ledger) Describe(ch chan<- *prometheus.Desc) {
	l.mended.Describe(ch)
	l.setAside.Describe(ch)
}

// Collect sends the ledger's metrics.
func (l *Ledger) Collect(ch chan<- prometheus.Metric) {
	l.mended.Collect(ch)
	l.setAside.Collect(ch)
}

// Results of e31_audit_runs_total.
const (
	// AuditOK: the audit read the whole log and found nothing.
	AuditOK = "ok"
	// AuditFindings: the audit ran to its end and found something wrong.
	AuditFindings = "findings"
	// AuditError: the audit could not run to its end (the server, the
	// ledger not answering).
	AuditError = "error"
)

// Audit is what a process that audits the log again and again (`e31 audit
// --every`) tells of it. Its methods may be called concurrently.
type Audit struct {
	runs     *prometheus.CounterVec
	findings prometheus.Gauge
	last     prometheus.Gauge
}

// NewAudit returns the audit's metrics, to register once per process.
func NewAudit() *Audit {
	a := &Audit{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "e31_audit_runs_total",
			Help: "Audits of the log since the process started, by result: ok, findings or error (could not run to its end).",
		}, []string{"result"}),
		findings: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "e31_audit_findings",
			Help: "What the last audit that ran to its end found wrong with the log or the ledger (0: nothing).",
		}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "e31_audit_last_completed_timestamp_seconds",
			Help: "When the last audit that ran to its end ended, in Unix seconds (0: none yet).",
		}),
	}
	for _, r := range []string{AuditOK, AuditFindings, AuditError} {
		a.runs.WithLabelValues(r)
	}
	return a
}

// Audited records one audit: findings is what it found if it ran to its
// end at end, err why it did not.
func (a *Audit) Audited(findings int, end time.Time, err error) {
	switch {
	case err != nil:
		a.runs.WithLabelValues(AuditError).Inc()
		return
	case findings > 0:
		a.runs.WithLabelValues(AuditFindings).Inc()
	default:
		a.runs.WithLabelValues(AuditOK).Inc()
	}
	a.findings.Set(float64(findings))
	a.last.Set(float64(end.UnixNano()) / 1e9)
}

// Describe sends the descriptions of the audit's metrics.
func (a *Audit) Describe(ch chan<- *prometheus.Desc) {
	a.runs.Describe(ch)
	a.findings.Describe(ch)
	a.last.Describe(ch)
}

// Collect sends the audit's metrics.
func (a *Audit) Collect(ch chan<- prometheus.Metric) {
	a.runs.Collect(ch)
	a.findings.Collect(ch)
	a.last.Collect(ch)
}
