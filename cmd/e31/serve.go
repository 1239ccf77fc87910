package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/jobfile"
)

func serveCmd(a *app) *cobra.Command {
	var node nodeConfig
	var memory, disk string
	cmd := &cobra.Command{
		Use:   "serve SERVICE",
		Short: "Run one service against an external NATS: submit, rent, run, output, release or ledger",
		Long: `Run one e31 service against the NATS server given by --nats (or $E31_NATS).
Any service may run as several instances; they share the work. 'e31 serve run'
is one compute node: give each node its own --node name.`,
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
				if node.WorkDir == "" {
					node.WorkDir = filepath.Join(os.TempDir(), "e31", node.Name)
				}
			}
			nc, js, err := connect.Dial(ctx, a.connectConfig("e31-"+name))
			if err != nil {
				return troubleErr(err)
			}
			defer nc.Close()
			svc, err := newService(ctx, name, nc, js, a.log, node)
			if err != nil {
				return err
			}
			a.log.Info("serving", "service", name, "nats", nc.ConnectedUrl())
			if err := svc.Run(ctx); err != nil {
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
	f.StringVar(&node.WorkDir, "work-dir", "", "run: where job workspaces are made (default $TMPDIR/e31/NODE)")
	f.StringVar(&node.Executor, "executor", "auto", "run: sandbox, process or auto")
	f.DurationVar(&node.Grace, "grace", 10*time.Second, "run: time between SIGTERM and SIGKILL")
	f.StringVar(&node.Instance, "instance", "", "rent: this instance's name, for its consumer of the log (default: the host name; give each instance on one host its own)")
	return cmd
}
