// Package daemon is the main function every e31 service binary shares:
// flags and environment read in one place, a context cancelled on SIGINT or
// SIGTERM, a connection to NATS, and the service run until it drains.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/ops"
	"github.com/e31net/e31/pkg/retry"
	"github.com/e31net/e31/pkg/trace"
)

// Runner is a service ready to run until its context ends.
type Runner interface {
	Run(ctx context.Context) error
}

// Env is what a service binary reads from the environment.
type Env struct {
	NATS, Creds, CA, Log string
	// HTTP and HTTPTokenFile: where the operator's endpoints listen, and
	// the bearer token they require beyond loopback.
	HTTP, HTTPTokenFile string
}

// Option adds to what Main does.
type Option func(*options)

type options struct {
	collectors []prometheus.Collector
}

// WithCollectors adds the service's own metrics to its /metrics.
func WithCollectors(cs ...prometheus.Collector) Option {
	return func(o *options) { o.collectors = append(o.collectors, cs...) }
}

// Build makes the service once connected.
type Build func(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (Runner, error)

// Main parses flags (the service's own are added to fs first), connects and
// runs the service. With --http it also serves the operator's endpoints
// (Endpoints). It returns the process exit code.
func Main(name string, fs *flag.FlagSet, args []string, build Build, opts ...Option) int {
	env := Env{NATS: os.Getenv("E31_NATS"), Creds: os.Getenv("E31_CREDS"), CA: os.Getenv("E31_TLS_CA"), Log: os.Getenv("E31_LOG"),
		HTTP: os.Getenv("E31_HTTP"), HTTPTokenFile: os.Getenv("E31_HTTP_TOKEN_FILE")}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	url := fs.String("nats", orDefault(env.NATS, connect.DefaultURL), "NATS server URL ($E31_NATS)")
	creds := fs.String("creds", env.Creds, "NATS credentials file ($E31_CREDS)")
	ca := fs.String("tls-ca", env.CA, "PEM file of the authority that signed the NATS servers' certificates ($E31_TLS_CA)")
	level := fs.String("log-level", orDefault(env.Log, "info"), "debug, info, warn or error ($E31_LOG)")
	httpAddr := fs.String("http", env.HTTP, `serve /metrics, /healthz and /readyz on this address ("" for none; $E31_HTTP)`)
	tokenFile := fs.String("http-token-file", env.HTTPTokenFile, "a file whose first line is the bearer token every request to --http must show; needed beyond loopback ($E31_HTTP_TOKEN_FILE)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var token string
	if *tokenFile != "" {
		var err error
		if token, err = ops.ReadToken(*tokenFile); err != nil {
			fmt.Fprintf(os.Stderr, "%s: --http-token-file: %v\n", name, err)
			return 2
		}
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "%s: --log-level %q: expected debug, info, warn or error\n", name, *level)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})).With("service", name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Spans go where the standard OTEL_* variables say; nowhere without them.
	flush, err := trace.Setup(ctx, trace.ConfigFromEnv(os.Getenv), "e31-"+name)
	if err != nil {
		log.Error("tracing", "err", err)
		return 1
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := flush(fctx); err != nil {
			log.Warn("flushing the last spans", "err", err)
		}
	}()
	e := endpoints{addr: *httpAddr, token: token, collectors: o.collectors}
	if err := run(ctx, name, connect.Config{URL: *url, Creds: *creds, CA: *ca, Name: name, Logger: log}, e, log, build); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}

// endpoints is what Main was told to serve.
type endpoints struct {
	addr, token string
	collectors  []prometheus.Collector
}

func run(ctx context.Context, name string, cfg connect.Config, ep endpoints, log *slog.Logger, build Build) error {
	nc, js, err := connect.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if err := nc.Drain(); err != nil {
			log.Warn("draining the connection to NATS", "err", err)
		}
	}()
	var e *Endpoints
	if ep.addr != "" {
		e, err = NewEndpoints(EndpointsConfig{Service: name, Addr: ep.addr, Token: ep.token, NC: nc, JS: js, Logger: log, Collectors: ep.collectors})
		if err != nil {
			return fmt.Errorf("%s: --http: %w", name, err)
		}
		log.Info("serving /metrics, /healthz and /readyz", "http", e.Addr())
		ectx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := e.Run(ectx); err != nil {
				log.Error("http endpoints stopped", "err", err)
			}
		}()
		defer func() { cancel(); <-done }()
		ctx = e.Observe(ctx)
	}
	err = RunAgain(ctx, log, func(ctx context.Context) (Runner, error) {
		svc, err := build(ctx, nc, js, log)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if e != nil {
			e.Serving(svc)
		}
		log.Info("running", "nats", nc.ConnectedUrl())
		return svc, nil
	})
	if err != nil {
		return err
	}
	log.Info("stopped cleanly")
	return nil
}

// RunAgain starts a service and runs it until ctx ends. When starting or
// running it fails for a reason that passes by itself (retry.Transient: a
// NATS server restarting, a cluster electing a leader, a request that went
// unanswered meanwhile), it starts the service again after a pause, as a
// supervisor would, rather than exit: every service rebuilds what it needs
// from the log, and must ride out faults of the bus with no operator. Any
// other error is returned.
func RunAgain(ctx context.Context, log *slog.Logger, start func(ctx context.Context) (Runner, error)) error {
	pauses := retry.Service.BackOff()
	for {
		svc, err := start(ctx)
		if err == nil {
			began := time.Now()
			err = svc.Run(ctx)
			if time.Since(began) > time.Minute {
				// It ran for a while: this failure is a new one.
				pauses.Reset()
			}
		}
		switch {
		case ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)):
			return nil
		case err == nil:
			return nil
		case !retry.Transient(err) || ctx.Err() != nil:
			return err
		}
		delay := pauses.NextBackOff()
		log.Warn("the service failed for a reason that passes; starting it again", "in", delay, "err", err)
		if !sleep(ctx, delay) {
			return nil
		}
	}
}

// sleep pauses for d, or until ctx ends: false then.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
