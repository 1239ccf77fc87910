package stack

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/ops"
	"github.com/e31net/e31/pkg/web"
)

// EndpointsConfig says what a Stack serves its operator over HTTP.
type EndpointsConfig struct {
	// Addr and Token: see ops.Config.
	Addr, Token string
	// Page is the page served at /; its JS is the operator's, set here.
	Page web.Config
	// Optional: an address in use (another e31 dev on this machine) is no
	// reason to fail; ServeEndpoints then serves nothing and says so.
	Optional bool
}

// ListenError is the endpoints' address refused (ops.Listen's error: a
// missing token, ops.ErrTokenRequired, or an address taken), told apart
// from the stack's own failures.
type ListenError struct{ Err error }

func (e *ListenError) Error() string { return e.Err.Error() }
func (e *ListenError) Unwrap() error { return e.Err }

// ServeEndpoints starts, within the stack, the log's metrics (read as the
// auditor, who changes nothing), the consumers' lag (asked as the
// operator: listing consumers is the operator's), the page and the
// endpoints (/metrics, /healthz, /readyz, /), and returns where they
// listen, or "" if nowhere (Optional). They stop with the stack (Go). The
// figures of the services are there if Config.Metrics was set.
func (s *Stack) ServeEndpoints(cfg EndpointsConfig) (string, error) {
	nc, err := s.Connect(Auditor, "e31-dev-metrics")
	if err != nil {
		return "", err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return "", fmt.Errorf("dev: metrics: %w", err)
	}
	onc, err := s.Connect(Operator, "e31-dev-streams")
	if err != nil {
		nc.Close()
		return "", err
	}
	closeAll := func() {
		nc.Close()
		onc.Close()
	}
	ojs, err := jetstream.New(onc)
	if err != nil {
		closeAll()
		return "", fmt.Errorf("dev: metrics: %w", err)
	}
	cfg.Page.JS = ojs
	cfg.Page.Logger = s.log
	page, err := web.New(cfg.Page)
	if err != nil {
		closeAll()
		return "", err
	}
	logs := metrics.NewLogCollector(js, s.log)
	cs := []prometheus.Collector{logs, metrics.NewStreamCollector(ojs)}
	if s.handlers != nil {
		cs = append(cs, s.handlers)
	}
	if s.ledger != nil {
		cs = append(cs, s.ledger)
	}
	reg, err := metrics.NewRegistry(cs...)
	if err != nil {
		closeAll()
		return "", err
	}
	// Several RENT instances in one process: each one's figures carry its
	// id, so that only the leading one says e31_scheduler_leader 1.
	for id, sched := range s.schedulers {
		if err := prometheus.WrapRegistererWith(prometheus.Labels{"scheduler": id}, reg).Register(sched); err != nil {
			closeAll()
			return "", fmt.Errorf("dev: metrics: %w", err)
		}
	}
	srv, err := ops.Listen(ops.Config{Addr: cfg.Addr, Token: cfg.Token, Gatherer: reg, Page: page.Handler(), Logger: s.log,
		Ready: map[string]ops.Check{"log": logs.Ready, "services": s.Running}})
	if err != nil {
		closeAll()
		if cfg.Optional && errors.Is(err, syscall.EADDRINUSE) {
			s.log.Warn("not serving /metrics: the address is taken, perhaps by another e31 dev; give one with --http", "http", cfg.Addr)
			return "", nil
		}
		return "", &ListenError{err}
	}
	s.Go(func(ctx context.Context) error {
		// The connections close once both are done: a scrape under way
		// still asks the server while the log's reading stops.
		defer closeAll()
		var g errgroup.Group
		g.Go(func() error { return logs.Run(ctx) })
		g.Go(func() error { return page.Run(ctx) })
		g.Go(func() error { return srv.Serve(ctx) })
		if err := g.Wait(); err != nil {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	s.endpoints = srv.Addr()
	return s.endpoints, nil
}

// EndpointsAddr is where ServeEndpoints serves; "" if nowhere.
func (s *Stack) EndpointsAddr() string { return s.endpoints }
