// Command e31-output runs the OUTPUT service against NATS ($E31_NATS).
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/daemon"
	"github.com/e31net/e31/services/output"
)

func main() {
	fs := flag.NewFlagSet("e31-output", flag.ExitOnError)
	var cfg output.Config
	os.Exit(daemon.Main("output", fs, os.Args[1:], func(_ context.Context, _ *nats.Conn, js jetstream.JetStream, log *slog.Logger) (daemon.Runner, error) {
		cfg.Logger = log
		return output.New(js, cfg)
	}))
}
