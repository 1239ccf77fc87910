// Command e31-release runs the RELEASE service against NATS ($E31_NATS).
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/daemon"
	"github.com/e31net/e31/services/release"
)

func main() {
	fs := flag.NewFlagSet("e31-release", flag.ExitOnError)
	var cfg release.Config
	os.Exit(daemon.Main("release", fs, os.Args[1:], func(_ context.Context, _ *nats.Conn, js jetstream.JetStream, log *slog.Logger) (daemon.Runner, error) {
		cfg.Logger = log
		return release.New(js, cfg)
	}))
}
