// Command e31-ledger runs the LEDGER service against NATS ($E31_NATS).
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/daemon"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/services/ledger"
)

func main() {
	fs := flag.NewFlagSet("e31-ledger", flag.ExitOnError)
	var cfg ledger.Config
	// One for the process: the service is made again after a fault, and
	// its counts go on.
	mended := metrics.NewLedger()
	cfg.Observer = mended
	os.Exit(daemon.Main("ledger", fs, os.Args[1:], func(_ context.Context, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (daemon.Runner, error) {
		cfg.Logger = log
		return ledger.New(nc, js, cfg)
	}, daemon.WithCollectors(mended)))
}
