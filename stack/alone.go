package stack

import (
	"cmp"
	"context"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/daemon"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/ops"
	"github.com/e31net/e31/pkg/web"
	"github.com/e31net/e31/services/rent"
)

// Serveable is what runs alone against an external NATS (`e31 serve
// NAME`): the six services, and "web", the operator's page.
var Serveable = append(slices.Clone(Services), "web")

// AloneConfig is one service of Serveable run alone against an external
// NATS, with its operator's endpoints.
type AloneConfig struct {
	// Name is the service, one of Serveable.
	Name string
	// NC and JS are its connection, with credentials that allow it what
	// its step does (web: the operator's).
	NC *nats.Conn
	JS jetstream.JetStream
	// Configs holds the service's Config.
	Configs Configs
	// Addr and Token are where its endpoints listen, and the token they
	// require (ops.Config). No Addr serves nothing, except for web, whose
	// page is at ops.DefaultDevAddr unless told.
	Addr, Token string
	// Page is web's page; its JS and Logger are set here.
	Page   web.Config
	Logger *slog.Logger
}

// RunAlone runs the service until ctx ends, started again when it fails
// for a reason that passes (daemon.RunAgain), with its endpoints. RENT's
// scheduler figures and LEDGER's counts of what it mended are the
// process's: they go on over its restarts. An address the endpoints
// cannot have is a *ListenError.
func RunAlone(ctx context.Context, cfg AloneConfig) error {
	log := cmp.Or(cfg.Logger, slog.Default())
	var cs []prometheus.Collector
	if cfg.Name == "rent" {
		// Alone in its process, RENT sets the collector as e31-rent does.
		defer rent.TuneGC()()
	}
	if cfg.Name == "rent" && cfg.Configs.Rent.Observer == nil {
		sched := metrics.NewScheduler()
		cfg.Configs.Rent.Observer = sched
		cs = append(cs, sched)
	}
	if cfg.Name == "ledger" && cfg.Configs.Ledger.Observer == nil {
		mended := metrics.NewLedger()
		cfg.Configs.Ledger.Observer = mended
		cs = append(cs, mended)
	}
	ends, stop, err := StartEndpoints(ctx, cfg, cs...)
	if err != nil {
		return err
	}
	defer stop()
	if ends != nil {
		ctx = ends.Observe(ctx)
	}
	return daemon.RunAgain(ctx, log, func(ctx context.Context) (daemon.Runner, error) {
		var svc daemon.Runner = PageOnly{}
		if cfg.Name != "web" {
			s, err := NewService(cfg.Name, cfg.NC, cfg.JS, cfg.Configs, log)
			if err != nil {
				return nil, err
			}
			svc = s
		}
		if ends != nil {
			ends.Serving(svc)
		}
		log.Info("serving", "service", cfg.Name, "nats", cfg.NC.ConnectedUrl())
		return svc, nil
	})
}

// PageOnly is the service of `e31 serve web`: the page runs with the
// endpoints (StartEndpoints), so there is nothing else to do but wait.
type PageOnly struct{}

// Run waits until ctx ends.
func (PageOnly) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// StartEndpoints starts the endpoints of a service run alone
// (daemon.Endpoints, as every service binary serves them, with cs beside
// its own figures, and for web the page at /) and returns them, or nil if
// there is no address, and a function that stops them and waits until
// they have. An address refused is a *ListenError.
func StartEndpoints(ctx context.Context, cfg AloneConfig, cs ...prometheus.Collector) (*daemon.Endpoints, func(), error) {
	log := cmp.Or(cfg.Logger, slog.Default())
	var page *web.Page
	if cfg.Name == "web" {
		cfg.Page.JS, cfg.Page.Logger = cfg.JS, log
		var err error
		if page, err = web.New(cfg.Page); err != nil {
			return nil, nil, err
		}
		cfg.Addr = cmp.Or(cfg.Addr, ops.DefaultDevAddr)
	}
	if cfg.Addr == "" {
		return nil, func() {}, nil
	}
	ecfg := daemon.EndpointsConfig{Service: cfg.Name, Addr: cfg.Addr, Token: cfg.Token, NC: cfg.NC, JS: cfg.JS, Logger: log, Collectors: cs}
	if page != nil {
		ecfg.Page, ecfg.Ready = page.Handler(), map[string]ops.Check{"page": page.Ready}
	}
	e, err := daemon.NewEndpoints(ecfg)
	if err != nil {
		return nil, nil, &ListenError{err}
	}
	log.Info("serving /metrics, /healthz and /readyz", "http", e.Addr())
	ctx, cancel := context.WithCancel(ctx)
	// A group without a context: the endpoints failing must not stop the
	// service, which is what they only watch.
	var g errgroup.Group
	g.Go(func() error {
		if err := e.Run(ctx); err != nil {
			log.Error("http endpoints stopped", "err", err)
		}
		return nil
	})
	if page != nil {
		g.Go(func() error { return page.Run(ctx) })
	}
	return e, func() {
		cancel()
		_ = g.Wait()
	}, nil
}
