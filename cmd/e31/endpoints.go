package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/daemon"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/ops"
	"github.com/e31net/e31/pkg/web"
)

// httpOptions are the flags of the operator's endpoints (/metrics, /healthz,
// /readyz), the same for `e31 dev` and `e31 serve`.
type httpOptions struct {
	addr      string
	tokenFile string
	// viewersFile lists the page's viewers (readViewers).
	viewersFile string
	// traceURL links a job's trace id on the page (web.Config.TraceURL).
	traceURL string
	// page, when set, is served at / (pkg/web).
	page http.Handler
	// asked is whether --http was given: a default address that is taken
	// (another e31 dev on this machine) is then no reason not to start.
	asked bool
}

// httpHelp is what the help of both commands says about the endpoints,
// ending with what the command serves by default.
func httpHelp(byDefault string) string {
	return `With --http ADDR it serves, over HTTP on ADDR: /metrics (Prometheus), /healthz
(alive) and /readyz (connected and caught up with the log, or why not, in plain
text). ADDR must be a loopback address (127.0.0.1, [::1], localhost) unless
--http-token-file names a file whose first line is a token that every request
must then show as "Authorization: Bearer TOKEN". The page at / (e31 dev, and
'e31 serve web') is open on loopback; with --http-token-file or --http-viewers
its viewers log in with a token, and a submitter's token shows its own jobs
only. ` + byDefault
}

func (o *httpOptions) flags(f *pflag.FlagSet, def string) {
	f.StringVar(&o.addr, "http", def, `serve /metrics, /healthz and /readyz on this address ("" for none)`)
	f.StringVar(&o.tokenFile, "http-token-file", "", "a file with the bearer token that --http requires; needed to serve beyond loopback")
	f.StringVar(&o.traceURL, "http-trace-url", "", `the page links a job's trace id to this URL, "{trace}" replaced by the id (e.g. http://localhost:16686/trace/{trace})`)
	f.StringVar(&o.viewersFile, "http-viewers", "", `a file of "NAME TOKEN" lines: who may log in to the page at /, as a submitter (its own jobs) or operator/auditor`)
}

// listen binds the endpoints' address, or returns nil if there is none.
// A missing token for an address beyond loopback is a usage error.
func (o httpOptions) listen(log *slog.Logger, g prometheus.Gatherer, ready map[string]ops.Check) (*ops.Server, error) {
	if o.addr == "" {
		return nil, nil
	}
	var token string
	if o.tokenFile != "" {
		var err error
		if token, err = ops.ReadToken(o.tokenFile); err != nil {
			return nil, usageErr("--http-token-file: %v", err)
		}
	}
	s, err := ops.Listen(ops.Config{Addr: o.addr, Token: token, Gatherer: g, Ready: ready, Page: o.page, Logger: log})
	if errors.Is(err, ops.ErrTokenRequired) {
		return nil, usageErr("--http %s: %v", o.addr, err)
	}
	if err != nil {
		return nil, troubleErr(fmt.Errorf("--http: %w", err))
	}
	return s, nil
}

// serveDevEndpoints starts, within the system, the log's metrics (read as
// the auditor, who changes nothing), the consumers' lag (asked as the
// operator: listing consumers is the operator's) and the endpoints. They
// stop with it (stack.Stack.Go).
func (s *devSystem) serveDevEndpoints(o httpOptions, log *slog.Logger) error {
	if o.addr == "" {
		return nil
	}
	nc, err := s.connect(auditorID, "e31-dev-metrics", log)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("dev: metrics: %w", err)
	}
	onc, err := s.connect(operator, "e31-dev-streams", log)
	if err != nil {
		nc.Close()
		return err
	}
	closeAll := func() {
		nc.Close()
		onc.Close()
	}
	ojs, err := jetstream.New(onc)
	if err != nil {
		closeAll()
		return fmt.Errorf("dev: metrics: %w", err)
	}
	page, err := o.newPage(ojs, log)
	if err != nil {
		closeAll()
		return err
	}
	o.page = page.Handler()
	logs := metrics.NewLogCollector(js, log)
	reg, err := metrics.NewRegistry(logs, metrics.NewStreamCollector(ojs), s.handlers)
	if err != nil {
		closeAll()
		return err
	}
	// Several RENT instances in one process: each one's figures carry its
	// id, so that only the leading one says e31_scheduler_leader 1.
	for id, sched := range s.schedulers {
		if err := prometheus.WrapRegistererWith(prometheus.Labels{"scheduler": id}, reg).Register(sched); err != nil {
			closeAll()
			return fmt.Errorf("dev: metrics: %w", err)
		}
	}
	srv, err := o.listen(log, reg, map[string]ops.Check{
		"log":      logs.Ready,
		"services": s.Running,
	})
	if err != nil {
		closeAll()
		if !o.asked && errors.Is(err, syscall.EADDRINUSE) {
			log.Warn("not serving /metrics: the address is taken, perhaps by another e31 dev; give one with --http", "http", o.addr)
			return nil
		}
		return err
	}
	s.httpAddr = srv.Addr()
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
	return nil
}

// serveEndpoints starts the endpoints of `e31 serve NAME` (daemon.Endpoints,
// as every service binary serves them, and for NAME web the page at /) and
// returns them, or nil with --http "", and a function that stops them and
// waits until they have.
func serveEndpoints(ctx context.Context, o httpOptions, name string, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger, cs ...prometheus.Collector) (*daemon.Endpoints, func(), error) {
	var page *web.Page
	if name == "web" {
		var err error
		if page, err = o.newPage(js, log); err != nil {
			return nil, nil, err
		}
		o.addr = cmp.Or(o.addr, ops.DefaultDevAddr)
	}
	if o.addr == "" {
		return nil, func() {}, nil
	}
	var token string
	if o.tokenFile != "" {
		var err error
		if token, err = ops.ReadToken(o.tokenFile); err != nil {
			return nil, nil, usageErr("--http-token-file: %v", err)
		}
	}
	ecfg := daemon.EndpointsConfig{Service: name, Addr: o.addr, Token: token, NC: nc, JS: js, Logger: log, Collectors: cs}
	if page != nil {
		ecfg.Page, ecfg.Ready = page.Handler(), map[string]ops.Check{"page": page.Ready}
	}
	e, err := daemon.NewEndpoints(ecfg)
	if errors.Is(err, ops.ErrTokenRequired) {
		return nil, nil, usageErr("--http %s: %v", o.addr, err)
	}
	if err != nil {
		return nil, nil, troubleErr(fmt.Errorf("--http: %w", err))
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
