package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/daemon"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/services/run"
)

func serveCmd(a *app) *cobra.Command {
	var node nodeConfig
	var memory, disk, logCap string
	var httpOpts httpOptions
	cmd := &cobra.Command{
		Use:   "serve SERVICE",
		Short: "Run one service against an external NATS: submit, rent, run, output, release or ledger",
		Long: `Run one e31 service against the NATS server given by --nats (or $E31_NATS).
Any service may run as several instances; they share the work. 'e31 serve run'
is one compute node: give each node its own --node name.

` + httpHelp(`By default it serves
nothing: several services on one machine would want the same port. 'e31 serve
ledger' also serves the figures derived from the log (e31_jobs, the meter, the
pool).`),
		Args:      cobra.ExactArgs(1),
		ValidArgs: services,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			name := args[0]
			if name == "run" {
				var err error
				if node.MemoryBytes, err = jobfile.ParseSize(memory); err != nil {
					return usageErr("--node-memory: %v", err)
				}
				if node.DiskBytes, err = jobfile.ParseSize(disk); err != nil {
					return usageErr("--node-disk: %v", err)
				}
				if node.LogCap, err = jobfile.ParseSize(logCap); err != nil {
					return usageErr("--log-cap: %v", err)
				}
				if node.WorkDir == "" {
					node.WorkDir = filepath.Join(os.TempDir(), "e31", node.Name)
				}
				// Before connecting: a node that cannot isolate its jobs
				// refuses to run them, unless --executor process says to.
				if err := run.CheckExecutor(node.Executor); err != nil {
					return usageErr("%v", err)
				}
			}
			cfg := a.connectConfig("e31-" + name)
			if err := checkServiceCreds(cfg.Creds, name, node.Name); err != nil {
				return err
			}
			nc, js, err := connect.Dial(ctx, cfg)
			if err != nil {
				return troubleErr(err)
			}
			defer nc.Close()
			var cs []prometheus.Collector
			if name == "rent" {
				// One for the process: the service is made again after a
				// fault, and its figures go on.
				node.Scheduler = metrics.NewScheduler()
				cs = append(cs, node.Scheduler)
			}
			ends, stopHTTP, err := serveEndpoints(ctx, httpOpts, name, nc, js, a.log, cs...)
			if err != nil {
				return err
			}
			defer stopHTTP()
			if ends != nil {
				ctx = ends.Observe(ctx)
			}
			// Started again, rather than exit, when it fails for a reason
			// that passes (a NATS server restarting): see daemon.RunAgain.
			err = daemon.RunAgain(ctx, a.log, func(ctx context.Context) (daemon.Runner, error) {
				svc, err := newService(ctx, name, nc, js, a.log, node)
				if err != nil {
					return nil, err
				}
				if ends != nil {
					ends.Serving(svc)
				}
				a.log.Info("serving", "service", name, "nats", nc.ConnectedUrl())
				return svc, nil
			})
			if err != nil {
				return fmt.Errorf("serve %s: %w", name, err)
			}
			return nil
		},
	}
	host, _ := os.Hostname()
	f := cmd.Flags()
	f.StringVar(&node.Name, "node", host, "run: this node's id (one instance per id)")
	f.Float64Var(&node.CPU, "node-cpu", float64(runtime.NumCPU()), "run: cpu cores this node offers")
	f.StringVar(&memory, "node-memory", "4GiB", "run: memory this node offers")
	f.StringVar(&disk, "node-disk", "20GiB", "run: disk for job output and scratch space")
	f.StringVar(&logCap, "log-cap", "16MiB", "run: the most kept of each of a job's stdout and stderr: past it, the head and the last MiB")
	f.StringVar(&node.WorkDir, "work-dir", "", "run: where job workspaces are made (default $TMPDIR/e31/NODE)")
	f.StringVar(&node.Executor, "executor", "auto", "run: sandbox (needs root), process (NOT isolated, and the node says so), or auto (the sandbox, or refuse to start where it cannot run)")
	f.DurationVar(&node.Grace, "grace", 10*time.Second, "run: how long before its limit a job gets SIGTERM (at most a tenth of the limit; SIGKILL comes at the limit), and how long a cancelled job has between SIGTERM and SIGKILL")
	httpOpts.flags(f, "")
	f.StringVar(&node.Instance, "instance", "", "rent: this instance's name, for its consumer of the log (default: the host name; give each instance on one host its own)")
	return cmd
}

// checkServiceCreds refuses at once credentials made for another service or
// node: the server would refuse what the service does, one publish at a
// time.
func checkServiceCreds(file, service, node string) error {
	if file == "" {
		return nil
	}
	creds, err := auth.ReadCreds(file)
	if err != nil {
		return usageErr("--creds: %v", err)
	}
	id, err := creds.Identity()
	if errors.Is(err, auth.ErrNotE31) {
		return nil
	}
	if err != nil {
		return usageErr("--creds: %v", err)
	}
	switch {
	case id.Role == auth.Operator:
	case id.Role != auth.Service || id.Service != service:
		return usageErr("--creds %s are those of %s, not of the %s service", file, id, service)
	case service == auth.RunService && id.Name != node:
		return usageErr("--creds %s are node %s's; --node is %s", file, id.Name, node)
	}
	return nil
}
