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
	fs := flag.NewFlagSet("e31-rent", flag.ExitOnError)
	// Each instance reads the log on a consumer named after it: two
	// instances on one host need names of their own.
	instance := fs.String("instance", "", "this instance's name (default: the host name)")
	// One for the process: the service is made again after a fault, and
	// its figures go on.
	sched := metrics.NewScheduler()
	os.Exit(daemon.Main("rent", fs, os.Args[1:], func(_ context.Context, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger) (daemon.Runner, error) {
		host, _ := os.Hostname()
		return rent.New(nc, js, rent.Config{Source: "e31/rent/" + host, Logger: log, Instance: *instance, Observer: sched})
	}, daemon.WithCollectors(sched)))
}
