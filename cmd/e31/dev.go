package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/ops"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/stack"
)

type devOptions struct {
	dir    string
	listen string
	nodes  int
	// node is what every node offers and how it runs jobs, from the
	// node's own flags (run.Config.NodeFlags).
	node run.Config
	sync string
	// rentInstances and leaseTTL are for trying failover: several
	// schedulers, of which one decides, and how soon a dead node or
	// scheduler is noticed.
	rentInstances int
	leaseTTL      time.Duration
	// users are the submitters to write credentials for, into DIR/creds.
	users []string
	// http is where the operator's endpoints are served.
	http httpOptions
}

func devCmd(a *app) *cobra.Command {
	o := devOptions{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all of e31 on this machine: NATS JetStream, every service and N compute nodes",
		Long:  help("dev", "{http}", help("http")),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.http.asked = cmd.Flags().Changed("http")
			return runDev(cmd.Context(), a, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", ".e31", "where state is kept (NATS store, node workspaces)")
	f.StringVar(&o.listen, "listen", stack.DefaultListen, "address NATS listens on for clients")
	f.IntVar(&o.nodes, "nodes", 1, "number of compute nodes")
	// Each node's flags, defaults and help as the node's own main has them.
	serviceFlags(f, "each node", o.node.NodeFlags)
	f.StringVar(&o.sync, "sync", "always", "when the event store writes to disk: always or interval")
	f.IntVar(&o.rentInstances, "rent-instances", 1, "scheduler instances (one decides; the others take over if it dies)")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 10*time.Second, "how long a node or scheduler lives without renewing its lease (set when DIR is new)")
	f.StringSliceVar(&o.users, "users", nil, "submitters to write credentials for, into DIR/creds/NAME.creds (comma separated)")
	o.http.flags(f, ops.DefaultDevAddr)
	return cmd
}

func runDev(ctx context.Context, a *app, o devOptions) error {
	st, err := startDev(ctx, a, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "e31 dev: NATS JetStream listening on %s (store in %s, sync=%s)\n", st.Broker().ClientURL(), filepath.Join(o.dir, "nats"), o.sync)
	names := []string{"operator.creds", "auditor.creds"}
	for _, u := range st.Users() {
		names = append(names, u.Name+".creds")
	}
	fmt.Fprintf(a.out, "e31 dev: credentials in %s: %s (use with --creds or E31_CREDS)\n", st.CredsDir(), strings.Join(names, ", "))
	if slices.Contains(st.Users(), auth.Identity{Role: auth.Submitter, Name: a.env.User}) {
		fmt.Fprintf(a.out, "e31 dev: you are %s: e31 on this machine uses %s by itself when given no credentials\n", a.env.User, st.CredsFile(a.env.User))
	}
	if addr := st.EndpointsAddr(); addr != "" {
		fmt.Fprintf(a.out, "e31 dev: the page at http://%s/, metrics at /metrics, readiness at /readyz\n", addr)
	}
	fmt.Fprintf(a.out, "e31 dev: %d node(s) of %g cpu, %s memory; press Ctrl-C to stop\n", o.nodes, o.node.CPU, jobfile.FormatSize(o.node.MemoryBytes))
	<-ctx.Done()
	fmt.Fprintln(a.out, "e31 dev: stopping")
	return st.Stop()
}

// startDev reads the flags into a stack.Config and starts it, with the
// operator's endpoints; Stop shuts it down.
func startDev(ctx context.Context, a *app, o devOptions) (*stack.Stack, error) {
	cfg := stack.Config{Dir: o.dir, Listen: o.listen, Sync: broker.Sync(o.sync), Nodes: o.nodes,
		RentInstances: o.rentInstances, LeaseTTL: o.leaseTTL, Logger: a.log, Metrics: true,
		Node: o.node}
	if o.nodes < 1 || o.node.CPU <= 0 {
		return nil, usageErr("--nodes and --node-cpu must be positive")
	}
	// Before anything is started: nodes that cannot isolate their jobs
	// refuse to run them, unless --executor process says to.
	if err := run.CheckExecutor(o.node.ExecutorKind); err != nil {
		return nil, usageErr("%v", err)
	}
	cfg.Users, cfg.OSUser, cfg.ConfigDir = o.users, a.env.User, a.env.ConfigDir
	for _, u := range o.users {
		if err := (auth.Identity{Role: auth.Submitter, Name: strings.TrimSpace(u)}).Validate(); err != nil {
			return nil, usageErr("--users: %v", err)
		}
	}
	st, err := stack.Start(ctx, cfg)
	switch {
	case errors.Is(err, broker.ErrSync):
		return nil, usageErr("--sync: %v", err)
	case errors.Is(err, stack.ErrConfig):
		return nil, usageErr("dev: %v", err)
	case errors.Is(err, stack.ErrNATS):
		return nil, troubleErr(err)
	case err != nil:
		return nil, err
	}
	if err := serveDevEndpoints(st, o.http); err != nil {
		_ = st.Stop()
		return nil, err
	}
	return st, nil
}
