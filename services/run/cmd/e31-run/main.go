// Command e31-run runs the RUN agent of one compute node against NATS
// ($E31_NATS).
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/daemon"
	"github.com/e31net/e31/pkg/gate"
	"github.com/e31net/e31/services/run"
)

func main() {
	fs := flag.NewFlagSet("e31-run", flag.ExitOnError)
	var cfg run.Config
	cfg.Flags(fs)
	os.Exit(daemon.Main("run", fs, os.Args[1:], func(_ context.Context, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (daemon.Runner, error) {
		cfg.Logger = log
		// Its consumers and its jobs' data through the node gate, as a
		// node's credentials (the NODES account) let it.
		cfg.Gate = gate.NewClient(nc, cfg.Node)
		return run.New(js, cfg)
	}))
}
