package main

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/web"
)

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

// newPage makes the page reading the log as js, which must be the
// operator's.
func (o httpOptions) newPage(js jetstream.JetStream, log *slog.Logger) (*web.Page, error) {
	cfg, err := o.pageConfig()
	if err != nil {
		return nil, err
	}
	cfg.JS, cfg.Logger = js, log
	return web.New(cfg)
}

// pageOnly is `e31 serve web`'s service: the page runs with the endpoints
// (serveEndpoints), so there is nothing else to do but wait.
type pageOnly struct{}

// Run waits until ctx ends.
func (pageOnly) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
