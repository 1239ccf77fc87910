package metrics

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/e31net/e31/pkg/events"
)

var (
	descPending = prometheus.NewDesc("e31_consumer_pending",
		"Events of the log not yet delivered to a service's durable consumer: the lag to scale the service on.",
		[]string{"service", "consumer"}, nil)
	descAckPending = prometheus.NewDesc("e31_consumer_ack_pending",
		"Events delivered to a service's durable consumer and not yet acknowledged: what it is working on.",
		[]string{"service", "consumer"}, nil)
	descPoison = prometheus.NewDesc("e31_poison_messages",
		"Events a service could never handle, kept in the poison stream (for 30 days) with the reason.",
		[]string{"service"}, nil)
)

// scrapeTimeout bounds what one scrape waits for the server.
const scrapeTimeout = 3 * time.Second

// StreamCollector is a Prometheus collector of what the NATS server says,
// at each scrape, of the log's durable consumers (one per service instance,
// or per node) and of the poison stream. It needs to list the log's
// consumers and read the poison stream's info: the operator may, the
// auditor and the services may not (see pkg/auth). Collect may be called
// concurrently.
type StreamCollector struct {
	js jetstream.JetStream
}

// NewStreamCollector returns a collector that asks the server through js.
func NewStreamCollector(js jetstream.JetStream) *StreamCollector {
	return &StreamCollector{js: js}
}

// Describe sends the descriptions of every metric Collect sends.
func (c *StreamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPending
	ch <- descAckPending
	ch <- descPoison
}

// Collect asks the server. What it cannot learn is reported as an invalid
// metric, which the HTTP handler logs while it serves the rest.
func (c *StreamCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if err := c.consumers(ctx, ch); err != nil {
		ch <- prometheus.NewInvalidMetric(descPending, err)
	}
	if err := c.poison(ctx, ch); err != nil {
		ch <- prometheus.NewInvalidMetric(descPoison, err)
	}
}

func (c *StreamCollector) consumers(ctx context.Context, ch chan<- prometheus.Metric) error {
	stream, err := c.js.Stream(ctx, events.Stream)
	if err != nil {
		return fmt.Errorf("metrics: consumers of %s: %w", events.Stream, err)
	}
	list := stream.ListConsumers(ctx)
	for info := range list.Info() {
		// A projection's follower (RENT's, the LEDGER's, OUTPUT's, these
		// metrics': bus.Tail) is a reader's own, nameless and short-lived:
		// not a service's backlog. Each says how far it has read itself.
		if info.Config.Durable == "" {
			continue
		}
		service := ServiceOf(info.Name)
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(info.NumPending), service, info.Name)
		ch <- prometheus.MustNewConstMetric(descAckPending, prometheus.GaugeValue, float64(info.NumAckPending), service, info.Name)
	}
	if err := list.Err(); err != nil {
		return fmt.Errorf("metrics: consumers of %s: %w", events.Stream, err)
	}
	return nil
}

func (c *StreamCollector) poison(ctx context.Context, ch chan<- prometheus.Metric) error {
	stream, err := c.js.Stream(ctx, events.PoisonStream)
	if err != nil {
		return fmt.Errorf("metrics: %s: %w", events.PoisonStream, err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(events.PoisonSubjects))
	if err != nil {
		return fmt.Errorf("metrics: %s: %w", events.PoisonStream, err)
	}
	for subject, n := range info.State.Subjects {
		// e31.poison.<service>: the service is the subject's last token.
		service := subject[strings.LastIndexByte(subject, '.')+1:]
		ch <- prometheus.MustNewConstMetric(descPoison, prometheus.GaugeValue, float64(n), service)
	}
	return nil
}

// ServiceOf is the service a durable consumer of the log belongs to: its
// name up to the first '-' or '_' ("rent" of "rent-rent-1_e31-job-any-…",
// "run" of a node's "run-node-1_…", "submit" of "submit_…").
func ServiceOf(consumer string) string {
	if i := strings.IndexAny(consumer, "-_"); i > 0 {
		return consumer[:i]
	}
	return consumer
}
