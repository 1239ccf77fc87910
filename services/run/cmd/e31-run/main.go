// Command e31-run runs the RUN agent of one compute node against NATS
// ($E31_NATS).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/daemon"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/run"
)

func main() {
	fs := flag.NewFlagSet("e31-run", flag.ExitOnError)
	host, _ := os.Hostname()
	node := fs.String("node", host, "this node's id (one instance per id)")
	cpu := fs.Float64("node-cpu", float64(runtime.NumCPU()), "cpu cores this node offers")
	memory := fs.String("node-memory", "4GiB", "memory this node offers")
	disk := fs.String("node-disk", "20GiB", "disk for job output and scratch space")
	workDir := fs.String("work-dir", filepath.Join(os.TempDir(), "e31"), "where job workspaces are made")
	exec := fs.String("executor", run.ExecAuto, "sandbox; process (NOT isolated, and the node says so); or auto: the sandbox, or refuse to start where it cannot run")
	grace := fs.Duration("grace", 10*time.Second, "how long before its limit a job gets SIGTERM (at most a tenth of the limit; SIGKILL comes at the limit), and how long a cancelled job has between SIGTERM and SIGKILL")
	logCap := fs.String("log-cap", "16MiB", "the most kept of each of a job's stdout and stderr: past it, the head and the last MiB")
	os.Exit(daemon.Main("run", fs, os.Args[1:], func(ctx context.Context, _ *nats.Conn, js jetstream.JetStream, log *slog.Logger) (daemon.Runner, error) {
		mem, err := jobfile.ParseSize(*memory)
		if err != nil {
			return nil, fmt.Errorf("--node-memory: %w", err)
		}
		dsk, err := jobfile.ParseSize(*disk)
		if err != nil {
			return nil, fmt.Errorf("--node-disk: %w", err)
		}
		lcap, err := jobfile.ParseSize(*logCap)
		if err != nil {
			return nil, fmt.Errorf("--log-cap: %w", err)
		}
		store, err := stage.Open(ctx, js)
		if err != nil {
			return nil, err
		}
		ex, err := run.OpenExecutorWith(*exec, filepath.Join(*workDir, *node, "jobs"), dsk, log, limits.Lookup{JS: js})
		if err != nil {
			return nil, err
		}
		return run.New(js, run.Config{Node: *node, CPU: *cpu, MemoryBytes: mem, DiskBytes: dsk, Executor: ex, Stores: store,
			AllowUnisolated: *exec == run.ExecProcess, Grace: *grace, LogCap: lcap, Source: "e31/run/" + *node, Logger: log})
	}))
}
