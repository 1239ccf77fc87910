package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/e31net/e31/pkg/ops"
	"github.com/e31net/e31/pkg/web"
	"github.com/e31net/e31/stack"
)

// httpOptions are the flags of the operator's endpoints (/metrics, /healthz,
// /readyz), the same for `e31 dev` and `e31 serve`.
type httpOptions struct {
	addr      string
	tokenFile string
	// viewersFile lists the page's viewers (web.ReadViewers).
	viewersFile string
	// traceURL links a job's trace id on the page (web.Config.TraceURL).
	traceURL string
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
	s, err := ops.Listen(ops.Config{Addr: o.addr, Token: token, Gatherer: g, Ready: ready, Logger: log})
	if err != nil {
		return nil, o.listenErr(err)
	}
	return s, nil
}

// serveDevEndpoints starts the system's endpoints (stack.ServeEndpoints)
// on --http. They stop with it.
func serveDevEndpoints(st *stack.Stack, o httpOptions) error {
	if o.addr == "" {
		return nil
	}
	page, err := o.pageConfig()
	if err != nil {
		return err
	}
	_, err = st.ServeEndpoints(stack.EndpointsConfig{Addr: o.addr, Token: page.Token, Page: page, Optional: !o.asked})
	var lerr *stack.ListenError
	if errors.As(err, &lerr) {
		return o.listenErr(lerr.Err)
	}
	return err
}

// pageConfig is the operator's page (pkg/web) that the endpoints serve
// at /. Its viewers log in with the token of --http-token-file (the
// operator) or one of --http-viewers; with neither, the page is open on
// loopback only (ops refuses any other address without a token).
func (o httpOptions) pageConfig() (web.Config, error) {
	token, err := o.token()
	if err != nil {
		return web.Config{}, err
	}
	viewers, err := web.ReadViewers(o.viewersFile)
	if err != nil {
		return web.Config{}, usageErr("--http-viewers: %v", err)
	}
	return web.Config{Token: token, Viewers: viewers, TraceURL: o.traceURL}, nil
}
