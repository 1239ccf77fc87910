// Command e31-rent runs the RENT service (the scheduler) against NATS ($E31_NATS).
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
	"github.com/e31net/e31/services/rent"
)

func main() {
	// The process is RENT's alone: its queue is most of the heap (see
	// rent.GCPercent).
	rent.TuneGC()
	fs := flag.NewFlagSet("e31-rent", flag.ExitOnError)
	var cfg rent.Config
	cfg.Flags(fs)
	// One for the process: the service is made again after a fault, and
	// its figures go on.
	sched := metrics.NewScheduler()
	cfg.Observer = sched
	os.Exit(daemon.Main("rent", fs, os.Args[1:], func(_ context.Context, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (daemon.Runner, error) {
		cfg.Logger = log
		return rent.New(nc, js, cfg)
	}, daemon.WithCollectors(sched)))
}
