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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/connect"
)

// Runner is a service ready to run until its context ends.
type Runner interface {
	Run(ctx context.Context) error
}

// Env is what a service binary reads from the environment.
type Env struct {
	NATS, Creds, Log string
}

// Build makes the service once connected.
type Build func(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (Runner, error)

// Main parses flags (the service's own are added to fs first), connects and
// runs the service. It returns the process exit code.
func Main(name string, fs *flag.FlagSet, args []string, build Build) int {
	env := Env{NATS: os.Getenv("E31_NATS"), Creds: os.Getenv("E31_CREDS"), Log: os.Getenv("E31_LOG")}
	url := fs.String("nats", orDefault(env.NATS, connect.DefaultURL), "NATS server URL ($E31_NATS)")
	creds := fs.String("creds", env.Creds, "NATS credentials file ($E31_CREDS)")
	level := fs.String("log-level", orDefault(env.Log, "info"), "debug, info, warn or error ($E31_LOG)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "%s: --log-level %q: expected debug, info, warn or error\n", name, *level)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})).With("service", name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, name, connect.Config{URL: *url, Creds: *creds, Name: name, Logger: log}, log, build); err != nil {
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, name string, cfg connect.Config, log *slog.Logger, build Build) error {
	nc, js, err := connect.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer nc.Drain()
	svc, err := build(ctx, nc, js, log)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	log.Info("running", "nats", nc.ConnectedUrl())
	if err := svc.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	log.Info("stopped cleanly")
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
