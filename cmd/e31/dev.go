package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/api"
	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/ops"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/run"
)

type devOptions struct {
	dir        string
	listen     string
	nodes      int
	nodeCPU    float64
	nodeMemory string
	nodeDisk   string
	logCap     string
	sync       string
	executor   string
	grace      time.Duration
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
		Long: `Run all of e31 in one process: an embedded NATS JetStream server listening on
--listen with its store in --dir, every service, and --nodes compute nodes of
the given size. It runs until interrupted (Ctrl-C), then stops the jobs still
running (they are recorded as lost with their node and held again on the next
start) and shuts down cleanly. Starting it again on the same --dir keeps every
job and record.

Durability: with --sync always (the default) every event is on disk before it
is acknowledged, so a machine crash loses nothing that was acknowledged;
--sync interval writes to disk every two minutes and is several times faster.

Authentication is on: every client, the services inside included, connects
with credentials and may do only what its role allows (pkg/auth). On first
start the operator, account and signing keys are made in DIR/keys (keep them
private); on every start credentials are written into DIR/creds: operator.creds
and auditor.creds, and NAME.creds for each submitter of --users and for the
user who runs it ($USER), whose data buckets are made too. The CLI on this
machine, given no credentials, uses $USER's for this server by itself; others
are used with --creds or E31_CREDS:

  e31 dev --users alice,bob
  e31 submit examples/hello/job.yaml                       # as $USER
  E31_CREDS=.e31/creds/alice.creds e31 submit examples/hello/job.yaml

` + httpHelp(`By default it serves on
127.0.0.1:8031; --http "" serves nothing.`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.http.asked = cmd.Flags().Changed("http")
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
	f.StringVar(&o.logCap, "log-cap", "16MiB", "the most kept of each of a job's stdout and stderr: past it, the head and the last MiB")
	f.StringVar(&o.sync, "sync", "always", "when the event store writes to disk: always or interval")
	f.StringVar(&o.executor, "executor", "auto", "how nodes run jobs: sandbox (isolated; needs root), process (NOT isolated, and the nodes say so), auto (the sandbox, or refuse to start where it cannot run)")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "how long before its limit a job gets SIGTERM (at most a tenth of the limit; SIGKILL comes at the limit), and how long a cancelled job has between SIGTERM and SIGKILL")
	f.IntVar(&o.rentInstances, "rent-instances", 1, "scheduler instances (one decides; the others take over if it dies)")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 10*time.Second, "how long a node or scheduler lives without renewing its lease (set when DIR is new)")
	f.StringSliceVar(&o.users, "users", nil, "submitters to write credentials for, into DIR/creds/NAME.creds (comma separated)")
	o.http.flags(f, ops.DefaultDevAddr)
	return cmd
}

// devSystem is a running `e31 dev`: the broker and every service.
type devSystem struct {
	broker   *broker.Server
	keys     *auth.Keys
	credsDir string
	// users are the submitters it wrote credentials for.
	users []auth.Identity
	// httpAddr is where the operator's endpoints listen; "" if nowhere.
	httpAddr string
	log      *slog.Logger
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	errs     []error
	services map[string]*devService
	// handlers watches every service's handlers, and schedulers each RENT
	// instance's scheduler (by id), for /metrics.
	handlers   *metrics.Handlers
	schedulers map[string]*metrics.Scheduler
}

// devService is one service of `e31 dev`, by an id such as "rent-1" or "node-2".
type devService struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
}

// crash stops one service as a crash would: its connection drops first, so
// it can neither tell anyone nor clean up, then it is stopped. For tests.
func (s *devSystem) crash(id string) {
	s.mu.Lock()
	svc := s.services[id]
	s.mu.Unlock()
	if svc == nil {
		return
	}
	svc.nc.Close()
	svc.cancel()
	<-svc.done
}

func runDev(ctx context.Context, a *app, o devOptions) error {
	sys, err := startDev(ctx, a, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "e31 dev: NATS JetStream listening on %s (store in %s, sync=%s)\n", sys.broker.ClientURL(), filepath.Join(o.dir, "nats"), o.sync)
	names := []string{"operator.creds", "auditor.creds"}
	for _, u := range sys.users {
		names = append(names, u.Name+".creds")
	}
	fmt.Fprintf(a.out, "e31 dev: credentials in %s: %s (use with --creds or E31_CREDS)\n", sys.credsDir, strings.Join(names, ", "))
	if slices.Contains(sys.users, auth.Identity{Role: auth.Submitter, Name: a.env.User}) {
		fmt.Fprintf(a.out, "e31 dev: you are %s: e31 on this machine uses %s by itself when given no credentials\n", a.env.User, sys.credsFile(a.env.User))
	}
	if sys.httpAddr != "" {
		fmt.Fprintf(a.out, "e31 dev: metrics at http://%s/metrics, readiness at /readyz\n", sys.httpAddr)
	}
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
	var logCap int64
	if o.logCap != "" {
		if logCap, err = jobfile.ParseSize(o.logCap); err != nil {
			return nil, usageErr("--log-cap: %v", err)
		}
	}
	if o.nodes < 1 || o.nodeCPU <= 0 {
		return nil, usageErr("--nodes and --node-cpu must be positive")
	}
	// Before anything is started: nodes that cannot isolate their jobs
	// refuse to run them, unless --executor process says to.
	if err := run.CheckExecutor(o.executor); err != nil {
		return nil, usageErr("%v", err)
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("dev: %w", err)
	}
	users := make([]auth.Identity, 0, len(o.users))
	for _, u := range o.users {
		id := auth.Identity{Role: auth.Submitter, Name: strings.TrimSpace(u)}
		if err := id.Validate(); err != nil {
			return nil, usageErr("--users: %v", err)
		}
		users = append(users, id)
	}
	// The user who runs e31 dev is a submitter too, so that the CLI in
	// another terminal works without credentials being exported
	// (clientConfig finds them). A name e31 reserves gets none.
	if me := (auth.Identity{Role: auth.Submitter, Name: a.env.User}); me.Validate() == nil && !slices.Contains(users, me) {
		users = append(users, me)
	}
	keys, trust, err := devKeys(dir)
	if err != nil {
		return nil, err
	}
	b, err := broker.Start(broker.Config{Dir: filepath.Join(dir, "nats"), Listen: o.listen, Sync: broker.Sync(o.sync), Name: "e31-dev", Trust: &trust})
	if err != nil {
		if errors.Is(err, broker.ErrSync) {
			return nil, usageErr("--sync: %v", err)
		}
		return nil, troubleErr(err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sys := &devSystem{broker: b, keys: keys, log: a.log, credsDir: filepath.Join(dir, "creds"), cancel: cancel, services: map[string]*devService{},
		handlers: metrics.NewHandlers(), schedulers: map[string]*metrics.Scheduler{}}
	start := func(name, id string, node nodeConfig) error {
		// Each service connects as itself, with its own permissions: a
		// service that reaches beyond its role fails here as it would
		// anywhere.
		who := auth.Identity{Role: auth.Service, Service: name, Name: id}
		nc, err := sys.connect(who, "e31-dev-"+id, a.log)
		if err != nil {
			return err
		}
		js, err := connect.Ready(runCtx, nc)
		if err != nil {
			nc.Close()
			return err
		}
		log := a.log
		if name == "rent" {
			node.Scheduler = metrics.NewScheduler()
			sys.schedulers[id] = node.Scheduler
		}
		svc, err := newService(runCtx, name, nc, js, log, node)
		if err != nil {
			nc.Close()
			return err
		}
		svcCtx, svcCancel := context.WithCancel(bus.WithObserver(runCtx, sys.handlers))
		ds := &devService{nc: nc, cancel: svcCancel, done: make(chan struct{})}
		sys.mu.Lock()
		sys.services[id] = ds
		sys.mu.Unlock()
		sys.wg.Add(1)
		go func() {
			defer sys.wg.Done()
			defer close(ds.done)
			defer nc.Close()
			if err := svc.Run(svcCtx); err != nil && svcCtx.Err() == nil {
				log.Error("service stopped", "service", name, "node", node.Name, "err", err)
				sys.mu.Lock()
				sys.errs = append(sys.errs, fmt.Errorf("%s: %w", name, err))
				sys.mu.Unlock()
			}
		}()
		return nil
	}
	if err := sys.setup(runCtx, o.leaseTTL, users); err != nil {
		_ = sys.stop()
		return nil, troubleErr(fmt.Errorf("dev: set up streams: %w", err))
	}
	sys.users = users
	if err := sys.writeCreds(users); err != nil {
		_ = sys.stop()
		return nil, err
	}
	if a.env.ConfigDir != "" {
		if err := connect.NoteDev(a.env.ConfigDir, strings.TrimPrefix(b.ClientURL(), "nats://"), dir); err != nil {
			a.log.Warn("the CLI will not find your credentials by itself", "err", err)
		}
	}
	for _, name := range []string{"ledger", "submit", "output", "release"} {
		if err := start(name, name, nodeConfig{}); err != nil {
			_ = sys.stop()
			return nil, err
		}
	}
	for i := 1; i <= max(o.rentInstances, 1); i++ {
		id := fmt.Sprintf("rent-%d", i)
		if err := start("rent", id, nodeConfig{Instance: id}); err != nil {
			_ = sys.stop()
			return nil, err
		}
	}
	for i := 1; i <= o.nodes; i++ {
		name := fmt.Sprintf("node-%d", i)
		node := nodeConfig{Name: name, CPU: o.nodeCPU, MemoryBytes: mem, DiskBytes: disk, WorkDir: filepath.Join(dir, "nodes", name),
			Executor: o.executor, Grace: o.grace, LogCap: logCap}
		if err := start("run", name, node); err != nil {
			_ = sys.stop()
			return nil, err
		}
	}
	if err := sys.serveDevEndpoints(runCtx, o.http, a.log); err != nil {
		_ = sys.stop()
		return nil, err
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

// devKeys loads the keys in DIR/keys, making them on first start, and
// signs what the server trusts.
func devKeys(dir string) (*auth.Keys, auth.Trust, error) {
	keys, created, err := auth.InitKeys(filepath.Join(dir, "keys"))
	if err != nil {
		return nil, auth.Trust{}, fmt.Errorf("dev: %w", err)
	}
	if created {
		// A store made before authentication keeps its streams in the
		// server's global account, which an operator-mode server never
		// opens: say so rather than start as if it were empty.
		if _, err := os.Stat(filepath.Join(dir, "nats", "jetstream", "$G")); err == nil {
			return nil, auth.Trust{}, usageErr("dev: %s was made by an e31 dev without authentication: its jobs cannot be carried over; use a new --dir", dir)
		}
	}
	trust, err := keys.Trust()
	if err != nil {
		return nil, auth.Trust{}, fmt.Errorf("dev: %w", err)
	}
	return keys, trust, nil
}

// connect opens an in-process connection as id. Refusals are logged: a
// service refused something it needs is a missing permission in pkg/auth.
func (s *devSystem) connect(id auth.Identity, name string, log *slog.Logger) (*nats.Conn, error) {
	creds, err := s.keys.Issue(id, 0)
	if err != nil {
		return nil, err
	}
	opts, err := creds.Options()
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		log.Warn("nats refused", "as", id.String(), "err", err)
	}))
	return s.broker.Connect(name, opts...)
}

// operator is the identity `e31 dev` sets up the system as.
var operator = auth.Identity{Role: auth.Operator, Name: events.Operator}

// auditorID is the identity that reads the log for the metrics: it may
// read everything and change nothing.
var auditorID = auth.Identity{Role: auth.Auditor, Name: api.Auditor}

// setup creates the streams and buckets, and every user's data bucket.
func (s *devSystem) setup(ctx context.Context, leaseTTL time.Duration, users []auth.Identity) error {
	nc, err := s.connect(operator, "e31-dev-setup", slog.Default())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := connect.Ready(ctx, nc)
	if err != nil {
		return err
	}
	if err := events.Setup(ctx, js, events.StreamOptions{LeaseTTL: leaseTTL}); err != nil {
		return err
	}
	if _, err := limits.Setup(ctx, js, 1); err != nil {
		return err
	}
	// A submitter may not make its own bucket (see auth.DataBucketSubjects).
	for _, u := range users {
		if _, err := stage.OpenBucket(ctx, js, u.Name); err != nil {
			return err
		}
	}
	return nil
}

// writeCreds writes the credentials of the operator, the auditor and each
// user into DIR/creds, readable by their owner only.
func (s *devSystem) writeCreds(users []auth.Identity) error {
	if err := os.MkdirAll(s.credsDir, 0o700); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	ids := append([]auth.Identity{operator, {Role: auth.Auditor, Name: api.Auditor}}, users...)
	for _, id := range ids {
		creds, err := s.keys.Issue(id, 0)
		if err != nil {
			return fmt.Errorf("dev: %w", err)
		}
		if err := creds.WriteFile(s.credsFile(id.Name)); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
	}
	return nil
}

// credsFile is where `e31 dev` writes the credentials of name.
func (s *devSystem) credsFile(name string) string { return filepath.Join(s.credsDir, name+".creds") }
