package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
)

type devOptions struct {
	dir        string
	listen     string
	nodes      int
	nodeCPU    float64
	nodeMemory string
	nodeDisk   string
	sync       string
	executor   string
	grace      time.Duration
}

func devCmd(a *app) *cobra.Command {
	o := devOptions{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all of e31 on this machine: NATS JetStream, every service and N compute nodes",
		Long: `Run all of e31 in one process: an embedded NATS JetStream server listening on
--listen with its store in --dir, every service, and --nodes compute nodes of
the given size. It runs until interrupted (Ctrl-C), then stops the jobs still
running (they are recorded as lost with their node and held again on the next
start) and shuts down cleanly. Starting it again on the same --dir keeps every
job and record.

Durability: with --sync always (the default) every event is on disk before it
is acknowledged, so a machine crash loses nothing that was acknowledged;
--sync interval writes to disk every two minutes and is several times faster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", ".e31", "where state is kept (NATS store, node workspaces)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:4222", "address NATS listens on for clients")
	f.IntVar(&o.nodes, "nodes", 1, "number of compute nodes")
	f.Float64Var(&o.nodeCPU, "node-cpu", float64(runtime.NumCPU()), "cpu cores per node")
	f.StringVar(&o.nodeMemory, "node-memory", "4GiB", "memory per node")
	f.StringVar(&o.nodeDisk, "node-disk", "20GiB", "disk for job output and scratch space per node")
	f.StringVar(&o.sync, "sync", "always", "when the event store writes to disk: always or interval")
	f.StringVar(&o.executor, "executor", "auto", "how nodes run jobs: sandbox (isolated; needs root), process (not isolated), auto")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when a job is stopped")
	return cmd
}

// devSystem is a running `e31 dev`: the broker and every service.
type devSystem struct {
	broker *broker.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func runDev(ctx context.Context, a *app, o devOptions) error {
	sys, err := startDev(ctx, a, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "e31 dev: NATS JetStream listening on %s (store in %s, sync=%s)\n", sys.broker.ClientURL(), filepath.Join(o.dir, "nats"), o.sync)
	fmt.Fprintf(a.out, "e31 dev: %d node(s) of %g cpu, %s memory; press Ctrl-C to stop\n", o.nodes, o.nodeCPU, o.nodeMemory)
	<-ctx.Done()
	fmt.Fprintln(a.out, "e31 dev: stopping")
	return sys.stop()
}

// startDev starts the broker and every service; stop shuts them down.
func startDev(ctx context.Context, a *app, o devOptions) (*devSystem, error) {
	mem, err := jobfile.ParseSize(o.nodeMemory)
	if err != nil {
		return nil, usageErr("--node-memory: %v", err)
	}
	disk, err := jobfile.ParseSize(o.nodeDisk)
	if err != nil {
		return nil, usageErr("--node-disk: %v", err)
	}
	if o.nodes < 1 || o.nodeCPU <= 0 {
		return nil, usageErr("--nodes and --node-cpu must be positive")
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("dev: %w", err)
	}
	b, err := broker.Start(broker.Config{Dir: filepath.Join(dir, "nats"), Listen: o.listen, Sync: broker.Sync(o.sync), Name: "e31-dev"})
	if err != nil {
		if errors.Is(err, broker.ErrSync) {
			return nil, usageErr("--sync: %v", err)
		}
		return nil, troubleErr(err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sys := &devSystem{broker: b, cancel: cancel}
	start := func(name string, node nodeConfig) error {
		nc, err := b.Connect("e31-dev-" + name)
		if err != nil {
			return err
		}
		js, err := connect.Ready(runCtx, nc)
		if err != nil {
			nc.Close()
			return err
		}
		log := a.log
		svc, err := newService(runCtx, name, nc, js, log, node)
		if err != nil {
			nc.Close()
			return err
		}
		sys.wg.Add(1)
		go func() {
			defer sys.wg.Done()
			defer nc.Close()
			if err := svc.Run(runCtx); err != nil && runCtx.Err() == nil {
				log.Error("service stopped", "service", name, "node", node.Name, "err", err)
				sys.mu.Lock()
				sys.errs = append(sys.errs, fmt.Errorf("%s: %w", name, err))
				sys.mu.Unlock()
			}
		}()
		return nil
	}
	if err := setupStreams(runCtx, b); err != nil {
		_ = sys.stop()
		return nil, troubleErr(fmt.Errorf("dev: set up streams: %w", err))
	}
	for _, name := range []string{"ledger", "submit", "rent", "output", "release"} {
		if err := start(name, nodeConfig{}); err != nil {
			_ = sys.stop()
			return nil, err
		}
	}
	for i := 1; i <= o.nodes; i++ {
		name := fmt.Sprintf("node-%d", i)
		node := nodeConfig{Name: name, CPU: o.nodeCPU, MemoryBytes: mem, DiskBytes: disk, WorkDir: filepath.Join(dir, "nodes", name),
			Executor: o.executor, Grace: o.grace}
		if err := start("run", node); err != nil {
			_ = sys.stop()
			return nil, err
		}
	}
	return sys, nil
}

// stop cancels every service, waits for them, then shuts the broker down.
func (s *devSystem) stop() error {
	s.cancel()
	s.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.broker.Shutdown(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(append(s.errs, err)...)
}

func setupStreams(ctx context.Context, b *broker.Server) error {
	nc, err := b.Connect("e31-dev-setup")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := connect.Ready(ctx, nc)
	if err != nil {
		return err
	}
	return events.Setup(ctx, js, events.StreamOptions{})
}
