package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/ledger"
	"github.com/e31net/e31/services/output"
	"github.com/e31net/e31/services/release"
	"github.com/e31net/e31/services/rent"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/executor/container"
	"github.com/e31net/e31/services/submit"
)

// services lists what `e31 serve` can run.
var services = []string{"submit", "rent", "run", "output", "release", "ledger"}

// runner is one service ready to run until its context ends.
type runner interface {
	Run(ctx context.Context) error
}

// nodeConfig is what one run node needs beyond the connection.
type nodeConfig struct {
	Name        string
	CPU         float64
	MemoryBytes int64
	DiskBytes   int64
	WorkDir     string
	// Executor is "sandbox", "process" or "auto". Only "process", the
	// operator's explicit choice, runs jobs unisolated (the node announces
	// it may); "auto" refuses to start where the sandbox cannot run.
	Executor string
	Grace    time.Duration
	// LogCap bounds what is kept of each of a job's stdout and stderr
	// (run.Config.LogCap); zero means the default.
	LogCap int64
	// Instance names one instance of a service that needs a name (rent).
	Instance string
	// Scheduler, if set, is told what RENT's scheduler does.
	Scheduler *metrics.Scheduler
}

// newService builds one service by name. This is the only place that knows
// every service.
func newService(ctx context.Context, name string, nc *nats.Conn, js jetstream.JetStream, log *slog.Logger, node nodeConfig) (runner, error) {
	host, _ := os.Hostname()
	source := "e31/" + name + "/" + host
	switch name {
	case "submit":
		store, err := openStores(ctx, js)
		if err != nil {
			return nil, err
		}
		return submit.New(js, submit.Config{Source: source, Logger: log, Stores: store})
	case "rent":
		cfg := rent.Config{Source: source, Logger: log, Instance: node.Instance}
		if node.Scheduler != nil {
			cfg.Observer = node.Scheduler
		}
		return rent.New(nc, js, cfg)
	case "output":
		store, err := openStores(ctx, js)
		if err != nil {
			return nil, err
		}
		return output.New(js, output.Config{Source: source, Logger: log, Stores: store})
	case "release":
		return release.New(js, release.Config{Source: source, Logger: log})
	case "ledger":
		return ledger.New(nc, js, ledger.Config{Source: source, Logger: log})
	case "run":
		store, err := openStores(ctx, js)
		if err != nil {
			return nil, err
		}
		exec, err := newExecutor(node, log, limits.Lookup{JS: js})
		if err != nil {
			return nil, err
		}
		svc, err := run.New(js, run.Config{
			Node: node.Name, CPU: node.CPU, MemoryBytes: node.MemoryBytes, DiskBytes: node.DiskBytes,
			Executor: exec, AllowUnisolated: node.Executor == run.ExecProcess,
			Stores: store, Grace: node.Grace, LogCap: node.LogCap, Source: "e31/run/" + node.Name, Logger: log,
		})
		if err != nil {
			closeExecutor(exec, log)
			return nil, err
		}
		return closingNode{svc, exec, log}, nil
	}
	return nil, usageErr("unknown service %q (expected one of %v)", name, services)
}

// openStores gives a service every submitter's store, creating a bucket
// when a submitter has none yet.
func openStores(ctx context.Context, js jetstream.JetStream) (stage.Stores, error) {
	return stage.Open(ctx, js)
}

// closingNode is a run node that closes its executor once it stopped: the
// sandbox unmounts the node's job disk (see sandbox.Config.DiskBytes), so
// that its work directory can be removed, and a later node mounts it anew.
type closingNode struct {
	*run.Service
	exec executor.Executor
	log  *slog.Logger
}

func (n closingNode) Run(ctx context.Context) error {
	defer closeExecutor(n.exec, n.log)
	return n.Service.Run(ctx)
}

func closeExecutor(exec executor.Executor, log *slog.Logger) {
	if c, ok := exec.(io.Closer); ok {
		if err := c.Close(); err != nil {
			log.Warn("close executor", "err", err)
		}
	}
}

// newExecutor opens the node's executor; its container executor checks
// each job's image against the operator's policy again.
func newExecutor(node nodeConfig, log *slog.Logger, images container.Images) (executor.Executor, error) {
	exec, err := run.OpenExecutorWith(node.Executor, filepath.Join(node.WorkDir, "jobs"), node.DiskBytes, log.With("node", node.Name), images)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return exec, nil
}
