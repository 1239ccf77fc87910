package metrics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
		service := subject
		if s, err := events.ParseSubject(subject); err == nil {
			service = s.Service
		}
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

// ConsumerCollector is a Prometheus collector of the service's own durable
// consumers, as its handlers recorded them (Handlers.Consuming): what a
// service instance can ask the server with its own credentials, which do
// not allow listing every consumer as StreamCollector does. Instances of
// one service share a consumer and report the same figures: aggregate
// them with max, not sum. Its methods may be called concurrently.
//
// It is also the service's readiness: Ready passes once every consumer
// exists and has, at least once since this process started, had nothing
// left to deliver, so that an instance that is still reading a backlog
// after a start is not counted as keeping up.
type ConsumerCollector struct {
	js jetstream.JetStream
	h  *Handlers

	mu       sync.Mutex
	caughtUp map[Consumer]bool
}

// NewConsumerCollector returns a collector of the consumers h records,
// asked of the server through js.
func NewConsumerCollector(js jetstream.JetStream, h *Handlers) *ConsumerCollector {
	return &ConsumerCollector{js: js, h: h, caughtUp: map[Consumer]bool{}}
}

// Describe sends the descriptions of every metric Collect sends.
func (c *ConsumerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPending
	ch <- descAckPending
}

// Collect asks the server about each consumer. A consumer it cannot learn
// about is reported as an invalid metric, which the HTTP handler logs while
// it serves the rest.
func (c *ConsumerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	for _, k := range c.h.Consumers() {
		info, err := c.info(ctx, k)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descPending, err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(info.NumPending), k.Service, k.Name)
		ch <- prometheus.MustNewConstMetric(descAckPending, prometheus.GaugeValue, float64(info.NumAckPending), k.Service, k.Name)
	}
}

// info asks the server about k and notes whether it has caught up.
func (c *ConsumerCollector) info(ctx context.Context, k Consumer) (*jetstream.ConsumerInfo, error) {
	cons, err := c.js.Consumer(ctx, k.Stream, k.Name)
	if err != nil {
		return nil, fmt.Errorf("metrics: consumer %s of %s: %w", k.Name, k.Stream, err)
	}
	info := cons.CachedInfo()
	if info.NumPending == 0 {
		c.mu.Lock()
		c.caughtUp[k] = true
		c.mu.Unlock()
	}
	return info, nil
}

// Ready reports why the service is not ready: no handler has subscribed
// yet, a consumer is not there, or one has yet to catch up with the log.
func (c *ConsumerCollector) Ready(ctx context.Context) error {
	ks := c.h.Consumers()
	if len(ks) == 0 {
		return errors.New("no handler has subscribed to the log yet")
	}
	var why []string
	for _, k := range ks {
		c.mu.Lock()
		ok := c.caughtUp[k]
		c.mu.Unlock()
		if ok {
			continue
		}
		info, err := c.info(ctx, k)
		switch {
		case err != nil:
			why = append(why, fmt.Sprintf("%s: not attached: %v", k.Name, err))
		case info.NumPending > 0:
			why = append(why, fmt.Sprintf("%s: catching up, %d events behind the log", k.Name, info.NumPending))
		}
	}
	if len(why) > 0 {
		return errors.New(strings.Join(why, "; "))
	}
	return nil
}
