package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/ops"
)

// Ready is a Runner that can say whether it is ready beyond being
// connected and caught up with the log (RENT: leading, or a warm standby).
// Ready is called concurrently with Run, on every request to /readyz.
type Ready interface {
	Ready(ctx context.Context) error
}

// EndpointsConfig says what one service process serves to its operator.
type EndpointsConfig struct {
	// Service names the service: the label of its handler metrics.
	Service string
	// Addr and Token: see ops.Config.
	Addr, Token string
	NC          *nats.Conn
	JS          jetstream.JetStream
	Logger      *slog.Logger
	// Collectors are the service's own metrics (RENT's scheduler).
	Collectors []prometheus.Collector
	// Page, if set, is served at / (ops.Config.Page).
	Page http.Handler
	// Ready are checks of /readyz beyond the service's own.
	Ready map[string]ops.Check
}

// consumes are the services that read the log on durable consumers of
// their own; the ledger reads it with a reader of its own, the page
// (web) asks the others.
var consumes = map[string]bool{"submit": true, "rent": true, "run": true, "output": true, "release": true}

// Endpoints are one service process's /metrics, /healthz and /readyz: the
// Go runtime and process, how its handlers fare, its durable consumers'
// lag and, in the ledger (which reads the whole log anyway), the figures
// derived from the log (there, e31_log_applied_sequence shows how far it
// has read, in place of a consumer's lag). One ledger instance per deployment gives those:
// summing instances of every service would count each job several times.
type Endpoints struct {
	handlers *metrics.Handlers
	srv      *ops.Server
	logs     *metrics.LogCollector

	mu     sync.Mutex
	runner Runner // the service running now, for /readyz
}

// NewEndpoints binds cfg.Addr at once and returns the endpoints; Run serves
// them.
func NewEndpoints(cfg EndpointsConfig) (*Endpoints, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := &Endpoints{handlers: metrics.NewHandlers()}
	consumers := metrics.NewConsumerCollector(cfg.JS, e.handlers)
	cs := append([]prometheus.Collector{e.handlers, consumers}, cfg.Collectors...)
	ready := map[string]ops.Check{
		"nats":    Connected(cfg.NC),
		"service": e.ready,
	}
	maps.Copy(ready, cfg.Ready)
	if consumes[cfg.Service] {
		ready["consumer"] = consumers.Ready
	}
	if cfg.Service == "ledger" {
		// The ledger reads the log with a reader of its own, no durable
		// consumer; it is ready once its records are rebuilt (its Ready).
		e.logs = metrics.NewLogCollector(cfg.JS, cfg.Logger)
		cs = append(cs, e.logs)
		ready["log"] = e.logs.Ready
	}
	reg, err := metrics.NewRegistry(cs...)
	if err != nil {
		return nil, err
	}
	e.srv, err = ops.Listen(ops.Config{Addr: cfg.Addr, Token: cfg.Token, Gatherer: reg, Ready: ready, Page: cfg.Page, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Addr is where the endpoints listen.
func (e *Endpoints) Addr() string { return e.srv.Addr() }

// Observe returns ctx carrying the observer of the service's handlers: run
// the service with it.
func (e *Endpoints) Observe(ctx context.Context) context.Context {
	return bus.WithObserver(ctx, e.handlers)
}

// Serving records the service now running, whose readiness /readyz asks
// if it is a Ready.
func (e *Endpoints) Serving(r Runner) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runner = r
}

func (e *Endpoints) ready(ctx context.Context) error {
	e.mu.Lock()
	r := e.runner
	e.mu.Unlock()
	if r == nil {
		return errors.New("starting")
	}
	if rr, ok := r.(Ready); ok {
		return rr.Ready(ctx)
	}
	return nil
}

// Run serves until ctx ends. A failure of the endpoints is logged and
// returned, never fatal to the service, which they only watch.
func (e *Endpoints) Run(ctx context.Context) error {
	var g errgroup.Group
	g.Go(func() error { return e.srv.Serve(ctx) })
	if e.logs != nil {
		g.Go(func() error { return e.logs.Run(ctx) })
	}
	return g.Wait()
}

// Close releases the address of endpoints that were never Run.
func (e *Endpoints) Close() error { return e.srv.Close() }

// Connected is the readiness check of a NATS connection.
func Connected(nc *nats.Conn) ops.Check {
	return func(context.Context) error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("not connected to NATS (%s)", st)
		}
		return nil
	}
}
