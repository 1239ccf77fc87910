package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/metrics"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/ledger"
	"github.com/e31net/e31/services/rent"
	"github.com/e31net/e31/services/run"
)

// Config describes a whole e31 in one process. Zero fields take the
// defaults given with each.
type Config struct {
	// Dir is where state is kept; made if missing. Required.
	Dir string
	// Listen is the address NATS listens on for clients; default
	// DefaultListen. "127.0.0.1:0" picks a free port.
	Listen string
	// Sync is when the event store writes to disk; default broker.SyncAlways.
	Sync broker.Sync
	// Nodes is the number of compute nodes; default 1.
	Nodes int
	// Node describes every node: its size, executor, grace and log cap.
	// Its Node (the id) and WorkDir are set for each, node-1 … node-N in
	// DIR/nodes/node-I; a zero CPU is run.DefaultCPU and a zero memory or
	// disk run's defaults. Its GPUs are node-1's only (the others offer
	// none).
	Node run.Config
	// RentInstances is the number of schedulers (one decides, the others
	// take over if it dies); default 1.
	RentInstances int
	// LeaseTTL is how long a node or scheduler lives without renewing its
	// lease (set when Dir is new); zero is the stream's default.
	LeaseTTL time.Duration
	// Users are the submitters it writes credentials for, into
	// DIR/creds/NAME.creds, and whose data buckets it makes.
	Users []string
	// Logger is every service's logger; default slog.Default.
	Logger *slog.Logger
	// Handlers, if set, is told how every service's handlers fare (the
	// operator's metrics; see bus.WithObserver).
	Handlers bus.Observer
	// Scheduler, if set, gives each RENT instance, by id, what is told
	// what its scheduler does.
	Scheduler func(id string) rent.Observer
	// OSUser is who runs the stack on this machine, made a submitter too
	// (if e31 gives that name), and ConfigDir the user's configuration
	// folder, where the stack notes where its credentials are
	// (connect.NoteDev): the CLI on this machine then uses them without
	// being given any.
	OSUser, ConfigDir string
	// Metrics, if Handlers and Scheduler are not set, sets them to watch
	// every service's handlers and each scheduler for the operator's
	// metrics, which ServeEndpoints then serves, with what LEDGER mended.
	Metrics bool
}

// DefaultListen is where the NATS of a Stack listens unless told.
const DefaultListen = "127.0.0.1:4222"

// ErrConfig wraps every error about a Config that nothing but another
// Config can mend.
var ErrConfig = errors.New("stack")

// ErrNATS wraps the errors of starting the embedded NATS server and of
// setting up its streams.
var ErrNATS = errors.New("stack: NATS")

// withDefaults returns c with the defaults of its zero fields, and checks it.
func (c Config) withDefaults() (Config, error) {
	if c.Dir == "" {
		return c, fmt.Errorf("%w: a directory is required", ErrConfig)
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Sync == "" {
		c.Sync = broker.SyncAlways
	}
	if c.Nodes == 0 {
		c.Nodes = 1
	}
	if c.Node.CPU == 0 {
		c.Node.CPU = run.DefaultCPU()
	}
	if c.Node.MemoryBytes == 0 {
		c.Node.MemoryBytes = run.DefaultMemoryBytes
	}
	if c.Node.DiskBytes == 0 {
		c.Node.DiskBytes = run.DefaultDiskBytes
	}
	if c.Nodes < 1 || c.Node.CPU <= 0 {
		return c, fmt.Errorf("%w: nodes and node cpu must be positive", ErrConfig)
	}
	c.RentInstances = max(c.RentInstances, 1)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Operator is the identity a Stack sets itself up as.
var Operator = auth.Identity{Role: auth.Operator, Name: events.Operator}

// Auditor is the identity that may read everything and change nothing.
var Auditor = auth.Identity{Role: auth.Auditor, Name: auth.AuditorName}

// Stack is a running e31: the broker and every service.
type Stack struct {
	broker   *broker.Server
	keys     *auth.Keys
	dir      string
	credsDir string
	users    []auth.Identity
	log      *slog.Logger
	// ctx ends when Stop is called; everything started runs under it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
	// services are the services running, by id ("rent-1", "node-2").
	services map[string]*service
	// handlers, schedulers and ledger are what Config.Metrics made:
	// every service's handlers, each RENT instance's scheduler by id, and
	// what LEDGER mended.
	handlers   *metrics.Handlers
	schedulers map[string]*metrics.Scheduler
	ledger     *metrics.Ledger
	// endpoints is where ServeEndpoints serves; "" if nowhere.
	endpoints string
}

// service is one service of a Stack.
type service struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
	// name is the service it is (rent, run, …): Stop stops them in turn.
	name string
}

// Start starts the broker and every service, and writes the credentials.
// Stop shuts them down. Its error wraps ErrConfig for a Config that cannot
// work, broker.ErrSync for an unknown Sync, and run.ErrNoIsolation for
// nodes that would have to isolate jobs on a host that cannot.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// Before anything is started: nodes that cannot isolate their jobs
	// refuse to run them, unless the executor is "process".
	if cfg.Node.Executor == nil {
		if err := run.CheckExecutor(cfg.Node.ExecutorKind); err != nil {
			return nil, err
		}
	}
	users := make([]auth.Identity, 0, len(cfg.Users))
	for _, u := range cfg.Users {
		id := auth.Identity{Role: auth.Submitter, Name: strings.TrimSpace(u)}
		if err := id.Validate(); err != nil {
			return nil, fmt.Errorf("%w: users: %w", ErrConfig, err)
		}
		if !slices.Contains(users, id) {
			users = append(users, id)
		}
	}
	// A name e31 reserves gets no credentials.
	if me := (auth.Identity{Role: auth.Submitter, Name: cfg.OSUser}); me.Validate() == nil && !slices.Contains(users, me) {
		users = append(users, me)
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	keys, trust, err := loadKeys(dir)
	if err != nil {
		return nil, err
	}
	b, err := broker.Start(broker.Config{Dir: filepath.Join(dir, "nats"), Listen: cfg.Listen, Sync: cfg.Sync, Name: "e31-dev", Trust: &trust})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNATS, err)
	}
	var handlers *metrics.Handlers
	var mended *metrics.Ledger
	schedulers := map[string]*metrics.Scheduler{}
	if cfg.Metrics && cfg.Handlers == nil && cfg.Scheduler == nil {
		handlers, mended = metrics.NewHandlers(), metrics.NewLedger()
		cfg.Handlers = handlers
		cfg.Scheduler = func(id string) rent.Observer {
			schedulers[id] = metrics.NewScheduler()
			return schedulers[id]
		}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if cfg.Handlers != nil {
		// Every service runs under ctx: their Routers find it there.
		ctx = bus.WithObserver(ctx, cfg.Handlers)
	}
	s := &Stack{broker: b, keys: keys, dir: dir, credsDir: filepath.Join(dir, "creds"), users: users, log: cfg.Logger,
		ctx: ctx, cancel: cancel, services: map[string]*service{}, handlers: handlers, schedulers: schedulers, ledger: mended}
	if err := s.start(cfg); err != nil {
		_ = s.Stop()
		return nil, err
	}
	if cfg.ConfigDir != "" {
		if err := connect.NoteDev(cfg.ConfigDir, strings.TrimPrefix(b.ClientURL(), "nats://"), dir); err != nil {
			s.log.Warn("the CLI will not find your credentials by itself", "err", err)
		}
	}
	return s, nil
}

// start sets up the streams, writes the credentials and starts every
// service.
func (s *Stack) start(cfg Config) error {
	if err := s.setup(cfg.LeaseTTL); err != nil {
		return fmt.Errorf("%w: set up streams: %w", ErrNATS, err)
	}
	if err := s.writeCreds(); err != nil {
		return err
	}
	var lc ledger.Config
	if s.ledger != nil {
		lc.Observer = s.ledger
	}
	for _, name := range []string{"ledger", "submit", "output", "release"} {
		if err := s.startService(name, name, Configs{Ledger: lc}); err != nil {
			return err
		}
	}
	for i := 1; i <= cfg.RentInstances; i++ {
		id := fmt.Sprintf("rent-%d", i)
		rc := rent.Config{Instance: id}
		rc.Pool.Cards = s.cards()
		if cfg.Scheduler != nil {
			rc.Observer = cfg.Scheduler(id)
		}
		if err := s.startService("rent", id, Configs{Rent: rc}); err != nil {
			return err
		}
	}
	for i := 1; i <= cfg.Nodes; i++ {
		node := cfg.Node
		node.Node = fmt.Sprintf("node-%d", i)
		node.WorkDir = filepath.Join(s.dir, "nodes", node.Node)
		if i > 1 {
			// The machine's GPUs are the first node's alone: two nodes
			// offering one device would give it to two jobs at once.
			node.GPUs = "none"
		}
		if err := s.carded(&node); err != nil {
			return err
		}
		if err := s.startService("run", node.Node, Configs{Run: node}); err != nil {
			return err
		}
	}
	return nil
}

// startService connects as the service id and runs it until Stop.
func (s *Stack) startService(name, id string, cfgs Configs) error {
	// Each service connects as itself, with its own permissions: a
	// service that reaches beyond its role fails here as it would
	// anywhere.
	nc, err := s.Connect(auth.Identity{Role: auth.Service, Service: name, Name: id}, "e31-dev-"+id)
	if err != nil {
		return err
	}
	js, err := connect.Ready(s.ctx, nc)
	if err != nil {
		nc.Close()
		return err
	}
	svc, err := NewService(name, nc, js, cfgs, s.log)
	if err != nil {
		nc.Close()
		return err
	}
	ctx, cancel := context.WithCancel(s.ctx)
	ss := &service{nc: nc, cancel: cancel, done: make(chan struct{}), name: name}
	s.mu.Lock()
	s.services[id] = ss
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(ss.done)
		defer nc.Close()
		if err := svc.Run(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("service stopped", "service", name, "id", id, "err", err)
			s.fail(fmt.Errorf("%s: %w", name, err))
		}
	}()
	return nil
}

// Go runs f beside the services until Stop, which waits for it and returns
// its error: the endpoints that watch the system, say.
func (s *Stack) Go(f func(ctx context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(s.ctx); err != nil {
			s.fail(err)
		}
	}()
}

// fail records an error that Stop returns.
func (s *Stack) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

// Running is nil while every service runs, and names those that stopped
// otherwise: a readiness check.
func (s *Stack) Running(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var stopped []string
	for id, svc := range s.services {
		select {
		case <-svc.done:
			stopped = append(stopped, id)
		default:
		}
	}
	if len(stopped) > 0 {
		slices.Sort(stopped)
		return fmt.Errorf("stopped: %s", strings.Join(stopped, ", "))
	}
	return nil
}

// Crash stops the service id as a crash would: its connection drops first,
// so it can neither tell anyone nor clean up, then it is stopped. For
// tests of failover.
func (s *Stack) Crash(id string) {
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

// Halt stops the service id as SIGTERM stops its process: its context
// ends and it does what it does on the way out (a node stops its jobs,
// saves their checkpoints, records how they stopped and gives its lease
// up). For tests of a node told to stop.
func (s *Stack) Halt(id string) {
	s.mu.Lock()
	svc := s.services[id]
	s.mu.Unlock()
	if svc == nil {
		return
	}
	svc.cancel()
	<-svc.done
}

// Stop cancels every service, waits for them, then shuts the broker down.
// The scheduler goes first, then the nodes, then the rest: a node that
// stops stores what its jobs wrote and left, and records how they
// stopped, through the node gate (OUTPUT) and the log, which are there
// until it is done; and no scheduler holds a job again on a node that is
// going. It returns what failed meanwhile.
func (s *Stack) Stop() error {
	for _, name := range []string{"rent", "run"} {
		s.mu.Lock()
		var these []*service
		for _, svc := range s.services {
			if svc.name == name {
				these = append(these, svc)
			}
		}
		s.mu.Unlock()
		for _, svc := range these {
			svc.cancel()
		}
		for _, svc := range these {
			<-svc.done
		}
	}
	s.cancel()
	s.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.broker.Shutdown(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(append(s.errs, err)...)
}

// Broker is the embedded NATS server.
func (s *Stack) Broker() *broker.Server { return s.broker }

// Dir is the absolute path of the directory the state is kept in.
func (s *Stack) Dir() string { return s.dir }

// Users are the submitters it wrote credentials for.
func (s *Stack) Users() []auth.Identity { return slices.Clone(s.users) }

// CredsDir is where it writes credentials.
func (s *Stack) CredsDir() string { return s.credsDir }

// CredsFile is where it writes the credentials of name.
func (s *Stack) CredsFile(name string) string { return filepath.Join(s.credsDir, name+".creds") }

// Connect opens an in-process connection as id. Refusals are logged: a
// service refused something it needs is a missing permission in pkg/auth.
func (s *Stack) Connect(id auth.Identity, name string) (*nats.Conn, error) {
	creds, err := s.keys.Issue(id, 0)
	if err != nil {
		return nil, err
	}
	opts, err := creds.Options()
	if err != nil {
		return nil, err
	}
	log := s.log
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		log.Warn("nats refused", "as", id.String(), "err", err)
	}))
	return s.broker.Connect(name, opts...)
}

// loadKeys loads the keys in DIR/keys, making them on first start, and
// signs what the server trusts.
func loadKeys(dir string) (*auth.Keys, auth.Trust, error) {
	keys, created, err := auth.InitKeys(filepath.Join(dir, "keys"))
	if err != nil {
		return nil, auth.Trust{}, fmt.Errorf("stack: %w", err)
	}
	if created {
		// A store made before authentication keeps its streams in the
		// server's global account, which an operator-mode server never
		// opens: say so rather than start as if it were empty.
		if _, err := os.Stat(filepath.Join(dir, "nats", "jetstream", "$G")); err == nil {
			return nil, auth.Trust{}, fmt.Errorf("%w: %s was made by an e31 dev without authentication: its jobs cannot be carried over; use a new directory", ErrConfig, dir)
		}
	}
	trust, err := keys.Trust()
	if err != nil {
		return nil, auth.Trust{}, fmt.Errorf("stack: %w", err)
	}
	return keys, trust, nil
}

// setup creates the streams and buckets, and every user's data bucket.
func (s *Stack) setup(leaseTTL time.Duration) error {
	nc, err := s.Connect(Operator, "e31-dev-setup")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := connect.Ready(s.ctx, nc)
	if err != nil {
		return err
	}
	if err := events.Setup(s.ctx, js, events.StreamOptions{LeaseTTL: leaseTTL}); err != nil {
		return err
	}
	// A DIR made before the nodes wrote their leases apart.
	if _, err := events.LinkNodeLeases(s.ctx, js); err != nil {
		return err
	}
	if _, err := limits.Setup(s.ctx, js, 1); err != nil {
		return err
	}
	// A submitter may not make its own bucket (see auth.DataBucketSubjects).
	for _, u := range s.users {
		if _, err := stage.OpenBucket(s.ctx, js, u.Name); err != nil {
			return err
		}
	}
	return nil
}

// writeCreds writes the credentials of the operator, the auditor and each
// user into DIR/creds, readable by their owner only.
func (s *Stack) writeCreds() error {
	if err := os.MkdirAll(s.credsDir, 0o700); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	for _, id := range append([]auth.Identity{Operator, Auditor}, s.users...) {
		creds, err := s.keys.Issue(id, 0)
		if err != nil {
			return fmt.Errorf("stack: %w", err)
		}
		if err := creds.WriteFile(s.CredsFile(id.Name)); err != nil {
			return fmt.Errorf("stack: %w", err)
		}
	}
	return nil
}
