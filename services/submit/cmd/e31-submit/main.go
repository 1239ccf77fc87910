// Command e31-submit runs the SUBMIT service against NATS ($E31_NATS).
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/daemon"
	"github.com/e31net/e31/services/submit"
)

func main() {
	fs := flag.NewFlagSet("e31-submit", flag.ExitOnError)
	var cfg submit.Config
	os.Exit(daemon.Main("submit", fs, os.Args[1:], func(_ context.Context, _ *nats.Conn, js jetstream.JetStream, log *slog.Logger) (daemon.Runner, error) {
		cfg.Logger = log
		return submit.New(js, cfg)
	}))
}
