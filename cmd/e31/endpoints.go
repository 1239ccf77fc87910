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
	"github.com/e31net/e31/pkg/ops"
	"github.com/e31net/e31/pkg/web"
	"github.com/e31net/e31/stack"
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

func (o *httpOptions) flags(f *pflag.FlagSet, def string) {
	f.StringVar(&o.addr, "http", def, `serve /metrics, /healthz and /readyz on this address ("" for none)`)
	f.StringVar(&o.tokenFile, "http-token-file", "", "a file with the bearer token that --http requires; needed to serve beyond loopback")
	f.StringVar(&o.traceURL, "http-trace-url", "", `the page links a job's trace id to this URL, "{trace}" replaced by the id (e.g. http://localhost:16686/trace/{trace})`)
	f.StringVar(&o.viewersFile, "http-viewers", "", `a file of "NAME TOKEN" lines: who may log in to the page at /, as a submitter (its own jobs) or operator/auditor`)
}

// token reads --http-token-file, if given.
func (o httpOptions) token() (string, error) {
	if o.tokenFile == "" {
		return "", nil
	}
	token, err := ops.ReadToken(o.tokenFile)
	if err != nil {
		return "", usageErr("--http-token-file: %v", err)
	}
	return token, nil
}

// listenErr says what a refused --http address is: a usage error for a
// missing token, else trouble.
func (o httpOptions) listenErr(err error) error {
	if errors.Is(err, ops.ErrTokenRequired) {
		return usageErr("--http %s: %v", o.addr, err)
	}
	return troubleErr(fmt.Errorf("--http: %w", err))
}

// listen binds the endpoints' address, or returns nil if there is none.
// A missing token for an address beyond loopback is a usage error.
func (o httpOptions) listen(log *slog.Logger, g prometheus.Gatherer, ready map[string]ops.Check) (*ops.Server, error) {
	if o.addr == "" {
		return nil, nil
	}
	token, err := o.token()
	if err != nil {
		return nil, err
	}
	s, err := ops.Listen(ops.Config{Addr: o.addr, Token: token, Gatherer: g, Ready: ready, Page: o.page, Logger: log})
	if err != nil {
		return nil, o.listenErr(err)
	}
	return s, nil
}

// serveDevEndpoints starts the system's endpoints (stack.ServeEndpoints)
// on --http. They stop with it.
func (s *devSystem) serveDevEndpoints(o httpOptions, log *slog.Logger) error {
	if o.addr == "" {
		return nil
	}
	page, err := o.pageConfig()
	if err != nil {
		return err
	}
	addr, err := s.ServeEndpoints(stack.EndpointsConfig{Addr: o.addr, Token: page.Token, Page: page, Handlers: s.handlers, Schedulers: s.schedulers})
	var lerr *stack.ListenError
	switch {
	case errors.As(err, &lerr) && !o.asked && errors.Is(err, syscall.EADDRINUSE):
		log.Warn("not serving /metrics: the address is taken, perhaps by another e31 dev; give one with --http", "http", o.addr)
		return nil
	case errors.As(err, &lerr):
		return o.listenErr(lerr.Err)
	case err != nil:
		return err
	}
	s.httpAddr = addr
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
	token, err := o.token()
	if err != nil {
		return nil, nil, err
	}
	ecfg := daemon.EndpointsConfig{Service: name, Addr: o.addr, Token: token, NC: nc, JS: js, Logger: log, Collectors: cs}
	if page != nil {
		ecfg.Page, ecfg.Ready = page.Handler(), map[string]ops.Check{"page": page.Ready}
	}
	e, err := daemon.NewEndpoints(ecfg)
	if err != nil {
		return nil, nil, o.listenErr(err)
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
