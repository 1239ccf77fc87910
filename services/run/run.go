// Package run is the RUN step: the agent on one compute node. It announces
// the node's capacity, runs each job held on it in an executor, enforces the
// job's limits, collects its output into the store and records how and why
// it stopped.
//
// A job is started at most once per attempt. RUN records RunStarted before
// it starts the job, and only while the hold is still the job's last event;
// the hold's message stays unacknowledged (kept alive with in-progress
// signals) until RunStopped is recorded. If the node dies in between, the
// hold is redelivered when it comes back, the log shows a start without a
// stop, and RUN records the attempt as lost with its node instead of
// running it again. RELEASE then lets RENT hold the job anew as a new
// attempt, visibly in the record.
//
// A node cut off from NATS stops its own jobs before its lease can lapse,
// so that a job is never held again while it still runs here (fence.go).
package run

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/gate"
	"github.com/e31net/e31/pkg/lease"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/retry"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/pkg/trace"
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/gpu"
)

// Config configures one node: what it offers and how it runs jobs. It is
// the one way a node is described, by its own main (e31-run), `e31 serve
// run` and `e31 dev` alike; Flags gives the flags that set it, and New the
// defaults of the fields left zero and the checks.
type Config struct {
	// Node is the node's id: one RUN instance per node id. Flags sets it
	// to the host name.
	Node        string
	CPU         float64
	MemoryBytes int64
	// GPU is a count of GPUs to announce without devices, for a node
	// whose driver lists none (a test's); a node that finds devices
	// (GPURoot, GPUs) announces each, and as many.
	GPU       int
	DiskBytes int64
	Labels    map[string]string
	// GPURoot is where the node reads its NVIDIA driver's view of its GPUs
	// (proc/driver/nvidia/gpus, proc/devices): "" or "/" on a real node, a
	// fake tree in a test. GPUs chooses which it offers: "auto" (every
	// one the driver lists; the default), "none", or UUIDs, comma
	// separated. GPUCheck is how often a withdrawn device is checked for
	// health again; default DefaultGPUCheck.
	GPURoot  string
	GPUs     string
	GPUCheck time.Duration

	// Executor runs the jobs. Nil: New opens the one ExecutorKind names,
	// with its workspaces under WorkDir, and Run closes it when it ends
	// (the sandbox unmounts the node's job disk, so that WorkDir can be
	// removed and a later node mounts it anew).
	Executor executor.Executor
	// ExecutorKind is ExecSandbox, ExecProcess or ExecAuto (the default):
	// see OpenExecutor. Used when Executor is nil.
	ExecutorKind string
	// WorkDir is the node's own directory: job workspaces are made in
	// WorkDir/jobs. Used when Executor is nil; default $TMPDIR/e31/NODE.
	WorkDir string
	// AllowUnisolated says the operator chose, explicitly, to let this
	// node run jobs without isolation (--executor process): the node
	// announces it, and RENT places jobs on a node whose executor isolates
	// nothing only then. When New opens the executor, it is set from
	// ExecutorKind.
	AllowUnisolated bool
	// Gate, if set, is how the node reaches what a node's permissions do
	// not let it reach itself (pkg/gate): its consumers, made for it, and
	// the store of each attempt held on it, while it is held. A node with
	// a node's credentials (the NODES account) needs it; Stores and Store
	// are then unused.
	Gate *gate.Client
	// Stores gives each submitter's store; Store, if set instead, serves
	// every submitter (tests). Neither nor Gate: every submitter's bucket
	// in js.
	Stores stage.Stores
	Store  stage.Store
	// Grace is how long before its limit a job gets SIGTERM (SIGKILL comes
	// at the limit), and how long a cancelled job has before SIGKILL. A
	// short job gets at most a tenth of its limit (executor.GraceFor).
	Grace time.Duration
	// MaxOutputBytes bounds what one job may return when it declares no
	// disk; otherwise its request.disk does.
	MaxOutputBytes int64
	// LogCap bounds what is kept of each of a job's stdout and stderr:
	// past it, the head and the last MiB (stage.JobLog). Default
	// DefaultLogCap.
	LogCap int64
	// LogFlush is how often a running job's new output is stored, for
	// `e31 logs --follow`. Default 1s.
	LogFlush time.Duration
	// FenceMargin is how long before its lease could lapse the node stops
	// every job it runs when it cannot renew it (SIGTERM then, SIGKILL at
	// half of it): see pkg/lease. Zero: a quarter of the lease's TTL. At
	// most half the TTL, which Run checks once it knows the TTL.
	FenceMargin time.Duration

	// SigningKey signs every stop the node reports (sign.go), and Card,
	// presented when the node announces itself, binds its public half and
	// the node's capacity to the node's name: both are made by `e31 creds
	// node`. Nil: stops are unsigned, and the node has no card. Read from
	// SigningKeyFile and CardFile when they are set.
	SigningKey     ed25519.PrivateKey
	Card           *events.NodeCard
	SigningKeyFile string
	CardFile       string

	// Source is the CloudEvents source it stamps; default "e31/run/NODE".
	Source string
	Logger *slog.Logger
	Now    func() time.Time
}

// errShutdown is the cause given to jobs stopped because the node stops.
var errShutdown = errors.New("run: the node is shutting down")

// errCancelRequested is the cause given to jobs a submitter cancelled.
var errCancelRequested = errors.New("run: cancel requested")

// errLimitBeforeStart is the cause given to preparing and staging a job
// when its limit passes before it could start.
var errLimitBeforeStart = errors.New("run: the limit passed before the job started")

// errFenced is why jobs are stopped when this node fences itself: it could
// not renew its lease in time, and the pool may count it dead and hold its
// jobs again elsewhere once the lease lapses (see fence.go).
var errFenced = errors.New("run: the node could not renew its lease in time")

// Service is the RUN agent of one node.
type Service struct {
	cfg Config
	js  jetstream.JetStream
	pub *bus.Publisher
	log *slog.Logger
	// ownsExec says New opened the executor, so Run closes it.
	ownsExec bool
	gpus     *nodeGPUs

	mu      sync.Mutex
	running map[string]*running          // by job id
	results map[string]events.RunStopped // stopped but not yet recorded, by job/attempt
	boot    string                       // of the lease held now
	// fenced is why the node stopped its jobs, while it has no lease it
	// can show (nil otherwise), and rejoined is closed once it has one
	// again: no job starts in between (see fence.go).
	fenced   *executor.StopBy
	rejoined chan struct{}
	margins  lease.Margins
}

type running struct {
	attempt   int
	submitter string
	cancel    context.CancelCauseFunc
	done      chan struct{}
	// sweep is the point of a member of a sweep (see sweep.go).
	sweep *events.SweepPoint
}

// New checks cfg, fills in the defaults of the fields left zero (see
// Config) and returns a Service. Unless cfg gives one, it opens the node's
// executor, which Run closes.
func New(js jetstream.JetStream, cfg Config) (*Service, error) {
	if !events.ValidID(cfg.Node) {
		return nil, fmt.Errorf("run: node id %q is not valid (letters, digits, '-' and '_')", cfg.Node)
	}
	if cfg.CPU <= 0 || cfg.MemoryBytes <= 0 {
		return nil, fmt.Errorf("run: node %s: cpu and memory must be positive", cfg.Node)
	}
	if err := cfg.readKeys(); err != nil {
		return nil, err
	}
	if cfg.Stores == nil && cfg.Store != nil {
		cfg.Stores = stage.Single{Store: cfg.Store}
	}
	if cfg.Stores == nil && cfg.Gate == nil {
		cfg.Stores = stage.NewTenants(js, true)
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.MaxOutputBytes <= 0 {
		cfg.MaxOutputBytes = 10 << 30
	}
	if cfg.LogCap <= 0 {
		cfg.LogCap = DefaultLogCap
	}
	if cfg.LogFlush <= 0 {
		cfg.LogFlush = time.Second
	}
	if cfg.FenceMargin < 0 {
		return nil, fmt.Errorf("run: node %s: fence margin %s: it must not be negative", cfg.Node, cfg.FenceMargin)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Source == "" {
		cfg.Source = "e31/run/" + cfg.Node
	}
	if cfg.GPUCheck <= 0 {
		cfg.GPUCheck = DefaultGPUCheck
	}
	gpus, err := openGPUs(cfg, cfg.Logger.With("node", cfg.Node))
	if err != nil {
		return nil, err
	}
	ownsExec := cfg.Executor == nil
	if ownsExec {
		if cfg.ExecutorKind == "" {
			cfg.ExecutorKind = ExecAuto
		}
		if cfg.WorkDir == "" {
			cfg.WorkDir = filepath.Join(os.TempDir(), "e31", cfg.Node)
		}
		exec, err := OpenExecutorWith(cfg.ExecutorKind, filepath.Join(cfg.WorkDir, "jobs"), cfg.DiskBytes,
			cfg.Logger.With("node", cfg.Node), limits.Lookup{JS: js})
		if err != nil {
			return nil, err
		}
		cfg.Executor, cfg.AllowUnisolated = exec, cfg.ExecutorKind == ExecProcess
	}
	if len(gpus.offered) > 0 && !executor.LimitsDevices(cfg.Executor) {
		cfg.Logger.Error("the executor cannot keep a job to its own GPUs on this host (no devices cgroup): the node offers none", "node", cfg.Node, "gpus", uuidsOf(gpus.offered))
		gpus.offered = nil
	}
	if len(gpus.offered) > 0 {
		cfg.GPU = len(gpus.offered)
	}
	return &Service{
		cfg: cfg, js: js, ownsExec: ownsExec, gpus: gpus,
		pub:     bus.NewPublisher(js, cfg.Source, cfg.Now),
		log:     cfg.Logger.With("service", "run", "node", cfg.Node),
		running: map[string]*running{},
		results: map[string]events.RunStopped{},
	}, nil
}

// closeExecutor closes the executor New opened, once Run is over.
func (s *Service) closeExecutor() {
	if c, ok := s.cfg.Executor.(io.Closer); ok && s.ownsExec {
		if err := c.Close(); err != nil {
			s.log.Warn("close executor", "err", err)
		}
	}
}

// Run announces the node and runs the jobs held on it until ctx ends. Then
// it stops the jobs still running, records them as lost with the node (so
// they are held again elsewhere) and returns.
func (s *Service) Run(ctx context.Context) error {
	defer s.closeExecutor()
	defer s.gpus.close()
	// A node with a node's credentials sets up nothing: it may not.
	if s.cfg.Gate == nil {
		if err := events.Setup(ctx, s.js, events.StreamOptions{}); err != nil {
			return err
		}
	}
	// Its own lease, in the bucket of the nodes' leases, which no node can
	// roll up: RENT sees it in the leases bucket, which sources it.
	kv, err := s.js.KeyValue(ctx, events.NodeLeasesBucket)
	if err != nil {
		return fmt.Errorf("run: leases: %w", err)
	}
	ttl, err := lease.TTL(ctx, kv)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	s.margins = lease.Margins{Fence: s.cfg.FenceMargin}.Or(ttl)
	if err := s.margins.Check(ttl); err != nil {
		return fmt.Errorf("run: node %s: %w (--fence-margin)", s.cfg.Node, err)
	}
	l, err := s.announce(ctx, kv)
	if err != nil {
		return err
	}

	// The lease is kept while the handlers run, also while they record
	// the jobs that the shutdown stopped, and given up once they are done:
	// RENT then counts the node gone at once rather than a lease time
	// later. If the handlers fail, Run ends with their error and the lease
	// goes with them; if the lease cannot be kept, the handlers stop.
	g, gctx := errgroup.WithContext(ctx)
	handling, handled := context.WithCancel(context.WithoutCancel(ctx))
	defer handled()
	g.Go(func() error { return s.keepLease(handling, kv, l) })
	g.Go(func() error { return s.checkGPUs(gctx) })
	g.Go(func() error {
		defer handled()
		err := s.handle(gctx)
		if err == nil && gctx.Err() == nil {
			err = errors.New("run: the handlers stopped")
		}
		return err
	})
	return g.Wait()
}

// handle runs the node's handlers until ctx ends, on the consumers a node
// reads (gate.NodeConsumers), made by the gate where the node may not.
func (s *Service) handle(ctx context.Context) error {
	var makeConsumer func(context.Context, string, jetstream.ConsumerConfig) error
	if s.cfg.Gate != nil {
		makeConsumer = s.cfg.Gate.MakeConsumer
	}
	cs := gate.NodeConsumers(s.cfg.Node)
	holds, cancels := cs[0], cs[1]
	return bus.Run(ctx, s.js, s.pub, "run", s.log,
		bus.Handler{
			Name:  holds.Handler,
			Topic: holds.Topic,
			// Every hold at once: RENT already decided what fits here. A
			// hold whose node died is redelivered after AckWait, when the
			// node is back: short, because running jobs keep their holds
			// alive with in-progress signals.
			Subscriber: bus.SubscriberConfig{Durable: holds.Durable, Lanes: 0, MaxAckPending: 10000, AckWait: 10 * time.Second, Make: makeConsumer},
			Handle:     s.HandleHeld,
		},
		bus.Handler{
			Name:       cancels.Handler,
			Topic:      cancels.Topic,
			Subscriber: bus.SubscriberConfig{Durable: cancels.Durable, Lanes: 0, DeliverNew: true, Make: makeConsumer},
			Handle:     s.HandleCancel,
		},
	)
}

// announce claims the node's lease and records that the node (re)joined the
// pool. The lease comes first, so that the scheduler never sees a node
// announced without one.
func (s *Service) announce(ctx context.Context, kv jetstream.KeyValue) (*lease.Lease, error) {
	boot := strings.ReplaceAll(uuid.NewString(), "-", "")
	l, err := lease.Claim(ctx, kv, "node."+s.cfg.Node, boot, lease.OnUnanswered(s.reconnect))
	if err != nil {
		return nil, fmt.Errorf("run: lease for node %s: %w", s.cfg.Node, err)
	}
	// Announced before RENT sees the lease, the node could be taken for
	// lost, but only until the copy comes (RENT asks the nodes' bucket
	// before it counts a node lost): a copying that stalls delays RENT's
	// view of the node, and must not keep the node from joining. Nor may
	// the wait outlast the lease's first renewal: nothing renews it
	// meanwhile, and a node that waited a whole TTL fenced itself the
	// moment it joined, every time, while the copying stalled (the
	// cluster test, a NATS server cut off: a new boot every two seconds).
	seenCtx, cancel := context.WithTimeout(ctx, l.TTL()/3)
	err = s.leaseSeen(seenCtx, func(held string) bool { return held == boot })
	cancel()
	if err != nil && ctx.Err() == nil {
		s.log.Warn("the node's lease is not yet seen where RENT watches: announcing anyway", "boot", boot, "err", err)
	} else if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.boot = boot
	s.mu.Unlock()
	labels := map[string]string{}
	for k, v := range s.cfg.Labels {
		labels[k] = v
	}
	if c, ok := s.cfg.Executor.(interface{ Containers() bool }); ok && c.Containers() {
		labels[events.LabelContainers] = "true"
	}
	ann := events.NodeAnnounced{
		Node: s.cfg.Node, Boot: boot, CPU: s.cfg.CPU, MemoryBytes: s.cfg.MemoryBytes,
		GPU: s.cfg.GPU, DiskBytes: s.cfg.DiskBytes, Labels: labels,
		Isolation: executor.Isolation(s.cfg.Executor), AllowUnisolated: s.cfg.AllowUnisolated,
		Devices: s.gpus.offered,
		Card:    s.cfg.Card,
	}
	before := previousDevices(ctx, s.js, s.cfg.Node)
	if _, err := s.pub.Append(ctx, s.cfg.Node, &ann); err != nil {
		return nil, fmt.Errorf("run: announce node %s: %w", s.cfg.Node, err)
	}
	s.tell(ctx, withdrawals(s.gpus.announced(boot, before))...)
	s.log.Info("node announced", "boot", boot, "cpu", s.cfg.CPU, "memory_bytes", s.cfg.MemoryBytes,
		"isolation", ann.Isolation, "allow_unisolated", ann.AllowUnisolated)
	return l, nil
}

// leaseSeen waits until the leases bucket, which RENT watches, holds what
// see wants of the node's lease (its boot; "" for none): it has it from
// the nodes' bucket, a moment later. Announced before, the node could be
// taken for lost: the release of its boot before, which the bucket may
// take first, reads as its new boot's lease gone. Gone before its release
// is seen there, the node could leave RENT, stopped or restarted meanwhile,
// taking its old boot for live and holding a job on it.
func (s *Service) leaseSeen(ctx context.Context, see func(held string) bool) error {
	subject := events.LeaseGetSubject("node." + s.cfg.Node)
	return retry.Do(ctx, retry.Step, func() error {
		tctx, cancel := context.WithTimeout(ctx, tryRequest)
		defer cancel()
		m, err := s.js.Conn().RequestWithContext(tctx, subject, nil)
		if err != nil {
			return err
		}
		held := string(m.Data)
		if m.Header.Get("Status") != "" || m.Header.Get("KV-Operation") != "" {
			held = ""
		}
		if !see(held) {
			return errLeaseUnseen
		}
		return nil
	}, retry.If(retry.Always))
}

// errLeaseUnseen is the leases bucket not yet holding the node's lease.
var errLeaseUnseen = errors.New("run: the leases bucket does not hold the node's lease yet")

// HandleHeld runs one held job to its end and records how it stopped. It
// returns only once RunStopped is recorded (or the node stops).
func (s *Service) HandleHeld(ctx context.Context, env events.Envelope) error {
	held, ok := env.Event.(*events.ComputeHeld)
	if !ok || held.Node != s.cfg.Node {
		return nil
	}
	job := env.Subject
	log := s.log.With("job", job, "attempt", held.Attempt)
	// Nothing starts while the node has no lease it can show.
	if err := s.waitRejoined(ctx); err != nil {
		return err
	}

	s.mu.Lock()
	for {
		r := s.running[job]
		if r == nil {
			break
		}
		// Delivered again while this node runs it: wait for the first
		// delivery, which decides it. Another attempt of the job may still
		// be stopping here (its node was counted lost and it was held again
		// on this same node): wait for that one to end, then decide this one.
		s.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.attempt == held.Attempt {
			return nil
		}
		s.mu.Lock()
	}
	// The job's own context outlives this delivery's, but stays in its
	// trace: the sandbox and the upload are spans of this handling.
	jobCtx, cancel := context.WithCancelCause(oteltrace.ContextWithSpan(context.Background(), oteltrace.SpanFromContext(ctx)))
	r := &running{attempt: held.Attempt, submitter: held.Submitter, cancel: cancel, done: make(chan struct{}), sweep: held.Spec.Sweep}
	s.running[job] = r
	if s.fenced != nil {
		// Fenced since the wait above: stopped before it starts.
		cancel(s.fenced)
	}
	cached, hasResult := s.results[resultKey(job, held.Attempt)]
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, job)
		s.mu.Unlock()
		close(r.done)
		cancel(nil)
	}()
	// Stop the job when the node stops, but not when one delivery's context
	// ends for another reason.
	stopOnShutdown := context.AfterFunc(ctx, func() { cancel(errShutdown) })
	defer stopOnShutdown()

	// The start is decided even if the node is stopping meanwhile: a start
	// that is stored must be known here, so that it is stopped and recorded.
	decideCtx, cancelDecide := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelDecide()
	// A later attempt resumes from the last checkpoint an earlier one saved.
	resume, err := s.resumeOf(decideCtx, job, held)
	if err != nil {
		return fmt.Errorf("start %s attempt %d: %w", job, held.Attempt, err)
	}
	decide, err := s.sweepStart(decideCtx, job, held, func(after []events.Envelope) ([]events.Event, error) {
		evs := refuse(DecideStart(*held, after, cached, hasResult, s.isolationOf(job, held)), *held, s.gpus.refusal(job, held.Hold))
		if len(evs) == 1 && resume != nil {
			start, _ := evs[0].(*events.RunStarted)
			if start != nil {
				start.ResumedFrom = resume.SaveName()
			}
		}
		return s.signed(job, evs), nil
	})
	if err != nil {
		return fmt.Errorf("start %s attempt %d: %w", job, held.Attempt, err)
	}
	stored, err := s.pub.React(decideCtx, env, decide)
	if err != nil {
		return fmt.Errorf("start %s attempt %d: %w", job, held.Attempt, err)
	}
	if len(stored) == 0 {
		return nil
	}
	if _, isStart := stored[0].Event.(*events.RunStarted); !isStart {
		s.forget(job, held.Attempt)
		log.Info("recorded without running", "outcome", stored[0].Event.(*events.RunStopped).Outcome)
		return nil
	}
	log.Info("run started", "seq", stored[0].Seq)
	stopped := s.execute(jobCtx, job, held, env.Time, stored[0], resume, log)
	s.mu.Lock()
	s.results[resultKey(job, held.Attempt)] = stopped
	s.mu.Unlock()
	recorded, err := s.record(context.WithoutCancel(ctx), stored[0], stopped)
	if err != nil {
		return err
	}
	s.forget(job, held.Attempt)
	if recorded {
		log.Info("run stopped", "outcome", stopped.Outcome, "cpu_seconds", stopped.Usage.CPUSeconds)
	} else {
		log.Warn("run stopped after its attempt was given up as lost; its result is not recorded", "outcome", stopped.Outcome)
	}
	return nil
}

// record appends RunStopped after the attempt's start, unless the attempt
// was given up meanwhile (its node was counted lost and the job held again):
// a late result must not land after the attempt's release. It retries for
// a while, because the result is only on this node until it is in the log,
// and reports whether it recorded it.
func (s *Service) record(ctx context.Context, started events.Envelope, stopped events.RunStopped) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, retry.Record.For)
	defer cancel()
	stored, err := retry.Value(ctx, retry.Record, func() ([]events.Envelope, error) {
		// Each try has its own deadline: a request that went to a server
		// which then died must not use up the whole two minutes.
		try, cancelTry := context.WithTimeout(ctx, tryRequest)
		defer cancelTry()
		return s.pub.React(try, started, func(after []events.Envelope) ([]events.Event, error) {
			return s.signed(started.Subject, DecideStop(stopped, after)), nil
		})
	}, retry.If(retry.Always), retry.OnRetry(func(err error, in time.Duration) {
		s.log.Warn("recording the stop failed; retrying", "job", started.Subject, "attempt", stopped.Attempt, "in", in, "err", err)
	}))
	if err != nil {
		return false, fmt.Errorf("record stop of %s attempt %d: %w", started.Subject, stopped.Attempt, err)
	}
	return len(stored) > 0, nil
}

// DecideStop is what RUN appends when a job it ran stops, given what
// happened to the job since its start: nothing if the stop is already
// recorded, or if the attempt was given up as lost with its node, or ended
// by RENT at its limit plus grace (a stop that late is set aside). A stop
// another node published of this node's attempt is no stop of it.
func DecideStop(stopped events.RunStopped, after []events.Envelope) []events.Event {
	for _, e := range after {
		if h, ok := events.HoldOf(e.Event); ok && h.Attempt == stopped.Attempt && events.FromHolder(e.Event, stopped.Node) {
			switch e.Event.(type) {
			case *events.RunStopped, *events.HoldLost, *events.HoldExpired, *events.ComputeReleased:
				return nil
			}
		}
	}
	return []events.Event{&stopped}
}

// outputOf is the output an earlier, succeeded job returned, as data.
func (s *Service) outputOf(ctx context.Context, store stage.Store, job string) (events.DataRef, error) {
	history, err := bus.ReadJob(ctx, s.js, job, 1)
	if err != nil {
		return events.DataRef{}, err
	}
	over, outcome, ret := events.FinalOutput(history)
	if !over || outcome != events.Succeeded || ret == nil {
		return events.DataRef{}, fmt.Errorf("job %s has not succeeded (outcome %q)", job, outcome)
	}
	if d, gone := events.DeletedOf(history, events.WhatOutput); gone {
		return events.DataRef{}, fmt.Errorf("job %s: %s", job, events.DeletedReason(d))
	}
	return stage.OutputRef(ctx, store, ret.Manifest, ret.Files)
}

func (s *Service) forget(job string, attempt int) {
	s.mu.Lock()
	delete(s.results, resultKey(job, attempt))
	s.mu.Unlock()
}

func resultKey(job string, attempt int) string { return fmt.Sprintf("%s/%d", job, attempt) }

// DecideStart is what RUN appends when a hold reaches it, given what
// happened to the job since the hold:
//   - the attempt already stopped, was given up as lost, or was ended by
//     RENT at its limit plus grace: nothing;
//   - this node holds the result of a run it could not record yet: that;
//   - it started but never stopped: the node lost it (it restarted);
//   - a cancel came first: stopped as cancelled, never started;
//   - otherwise: RunStarted, under the given isolation (the executor's for
//     this job).
//
// A start or a stop of the attempt from any other node is set aside: only
// this node speaks for what it holds.
func DecideStart(held events.ComputeHeld, after []events.Envelope, result events.RunStopped, hasResult bool, isolation events.Isolation) []events.Event {
	started, cancelled := false, false
	for _, e := range after {
		if !events.FromHolder(e.Event, held.Node) {
			continue
		}
		switch ev := e.Event.(type) {
		case *events.RunStopped:
			if ev.Attempt == held.Attempt {
				return nil
			}
		case *events.HoldLost:
			if ev.Attempt == held.Attempt {
				return nil
			}
		case *events.HoldExpired:
			if ev.Attempt == held.Attempt {
				return nil
			}
		case *events.ComputeReleased:
			if ev.Attempt == held.Attempt {
				return nil
			}
		case *events.RunStarted:
			started = started || ev.Attempt == held.Attempt
		case *events.CancelRequested:
			cancelled = cancelled || events.MayCancel(ev.By, held.Submitter)
		}
	}
	none := events.Collected{Files: []events.OutputFile{}, Missing: []string{}, Declared: held.Spec.Output}
	switch {
	case hasResult:
		return []events.Event{&result}
	case started:
		return []events.Event{&events.RunStopped{Hold: held.Hold, Outcome: events.NodeLost, Output: none,
			Reason: "the run node restarted while the job ran; e31 does not run an attempt twice"}}
	case cancelled:
		return []events.Event{&events.RunStopped{Hold: held.Hold, Outcome: events.Cancelled, Output: none,
			Reason: "cancelled before it started"}}
	}
	return []events.Event{&events.RunStarted{Hold: held.Hold, Isolation: isolation}}
}

// isolationOf is the isolation the executor runs the held job under: what
// its RunStarted, and so its hold record, says.
func (s *Service) isolationOf(job string, held *events.ComputeHeld) events.Isolation {
	return executor.IsolationOf(s.cfg.Executor, executor.Spec{JobID: job, Attempt: held.Attempt, Image: held.Spec.Work.Image})
}

// execute prepares the workspace, stages the data, runs the job and collects
// its output. Every failure becomes the stop's outcome and reason.
//
// The job's limit counts from heldAt, the hold's ce-time, when the meter
// started, not from the start of its process: the time spent staging its
// data is held compute too, and counting from the process start would let
// the bill pass the limit by that much. SIGKILL comes at the deadline, and
// SIGTERM a grace period before it.
//
// A job that declares a checkpoint has it restored first when resume names
// a save, and saved while it runs and once it stopped (checkpoint.go).
func (s *Service) execute(ctx context.Context, job string, held *events.ComputeHeld, heldAt time.Time, started events.Envelope, resume *events.CheckpointSaved, log *slog.Logger) events.RunStopped {
	spec := held.Spec
	limit := time.Duration(spec.Request.LimitSeconds * float64(time.Second))
	grace := executor.GraceFor(limit, s.cfg.Grace)
	deadline := Deadline(heldAt, limit, time.Now())
	// Preparing and staging end at the deadline too: a job whose data
	// takes its whole limit to stage has used up its hold.
	attrs := []attribute.KeyValue{trace.KeyJob.String(job), trace.KeyAttempt.Int(held.Attempt), trace.KeyNode.String(held.Node)}
	startCtx, startSpan := trace.Child(ctx, "run sandbox start", attrs...)
	defer startSpan.End() // on the paths that fail before the job runs; ending twice is nothing
	prepCtx, cancelPrep := context.WithDeadlineCause(startCtx, deadline, errLimitBeforeStart)
	defer cancelPrep()
	stopped := events.RunStopped{Hold: held.Hold,
		Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}, Declared: spec.Output}}
	// A failure before the job ran is the job's (bad data, say) unless it
	// was stopped meanwhile: then the stop says why.
	fail := func(format string, args ...any) events.RunStopped {
		stopped.Outcome = events.Failed
		stopped.Reason = fmt.Sprintf(format, args...)
		switch causeOf(prepCtx) {
		case errLimitBeforeStart:
			stopped.Outcome = events.LimitExceeded
			stopped.Reason = fmt.Sprintf("its limit of %s passed before it started (%s)", limit, stopped.Reason)
		case errShutdown:
			stopped.Outcome, stopped.Reason = events.NodeLost, "the node shut down before the job started"
		case errFenced:
			stopped.Outcome, stopped.Reason = events.NodeLost, fencedReason+" before the job started"
		case errCancelRequested:
			stopped.Outcome, stopped.Reason = events.Cancelled, "cancelled before it started"
		}
		return stopped
	}
	// What only e31 knows goes beside the declared environment: the attempt
	// (a job held again after its node was lost finds its checkpoint
	// restored, and E31_RESUMED_FROM naming it) and, in a sweep, its point.
	env := make(map[string]string, len(spec.Work.Env)+5)
	for k, v := range spec.Work.Env {
		env[k] = v
	}
	env["E31_ATTEMPT"] = strconv.Itoa(held.Attempt)
	// When the job is killed, and how long before that it hears of it: a
	// training loop can plan its last checkpoint.
	env["E31_DEADLINE"] = deadline.UTC().Format(time.RFC3339Nano)
	env["E31_GRACE_SECONDS"] = strconv.FormatFloat(grace.Seconds(), 'f', -1, 64)
	if spec.Checkpoint != nil {
		// Which save /out holds at the checkpoint's path: empty on a fresh start.
		env["E31_RESUMED_FROM"] = ""
		if resume != nil {
			env["E31_RESUMED_FROM"] = resume.SaveName()
		}
	}
	if sw := spec.Sweep; sw != nil {
		env["E31_SWEEP_ID"], env["E31_SWEEP_INDEX"] = sw.ID, strconv.Itoa(sw.Index)
		env["E31_SWEEP_COUNT"], env["E31_SWEEP_VALUE"] = strconv.Itoa(sw.Count), sw.Value
	}
	// Its GPUs, alone (see gpus.go), checked again once it is over.
	gpus, gaveBack := s.gpus.give(job, held.Hold, env)
	defer func() { s.tell(ctx, withdrawals(gaveBack())...) }()
	// The job's writable space is its request.disk. The hold's disk is more
	// when it stages inputs: they take the node's disk too, outside it.
	xspec := executor.Spec{
		JobID: job, Attempt: held.Attempt, Submitter: held.Submitter, Command: spec.Work.Command, Env: env, Image: spec.Work.Image,
		CPU: held.CPU, MemoryBytes: held.MemoryBytes, DiskBytes: spec.Request.DiskBytes,
		Limit: limit, Deadline: deadline, Grace: grace, GPUs: gpus,
	}
	// A job's data, output and logs live in its submitter's store, which
	// a node reaches through the gate, for this attempt alone.
	var store stage.Store
	err := again(prepCtx, log, "opening the store", tryRequest, func(ctx context.Context) (err error) {
		if s.cfg.Gate != nil {
			store = s.cfg.Gate.Store(job, held.Attempt)
			return nil
		}
		store, err = s.cfg.Stores.For(ctx, held.Submitter)
		return err
	})
	if err != nil {
		return fail("opening the store of %s: %v", held.Submitter, err)
	}
	logs := stage.NewJobLog(store, job, held.Attempt, s.cfg.LogCap)
	xspec.Stdout, xspec.Stderr = logs.Stdout(), logs.Stderr()
	xjob, err := s.cfg.Executor.Prepare(prepCtx, xspec)
	if err != nil {
		return fail("preparing the job's workspace: %v", err)
	}
	dirs := xjob.Dirs()
	defer func() {
		if err := xjob.Release(); err != nil {
			log.Warn("releasing the workspace", "err", err)
		}
	}()
	for _, ref := range spec.Data {
		if ref.Digest == "" && ref.FromJob != "" {
			// The earlier job had not finished when this one was submitted;
			// it has now (RENT held this job after it succeeded).
			resolved, err := s.outputOf(prepCtx, store, ref.FromJob)
			if err != nil {
				return fail("staging data %q from job %s: %v", ref.Name, ref.FromJob, err)
			}
			resolved.Name = ref.Name
			ref = resolved
		}
		// Data may be large: a try is bounded by the job's limit only.
		err := again(prepCtx, log, "staging data", 0, func(ctx context.Context) error {
			return stage.Download(ctx, store, ref, filepath.Join(dirs.DataDir, ref.Name), nil)
		})
		if err != nil {
			return fail("staging data %q: %v", ref.Name, err)
		}
	}
	if resume != nil {
		err := again(prepCtx, log, "restoring the checkpoint", 0, func(ctx context.Context) error {
			return restore(ctx, store, resume, spec.Checkpoint, dirs.OutDir)
		})
		if err != nil {
			return fail("restoring checkpoint %s into /out/%s: %v", resume.SaveName(), spec.Checkpoint.Path, err)
		}
		log.Info("checkpoint restored", "save", resume.SaveName(), "files", resume.Files, "bytes", resume.Bytes)
	}
	saver := s.newSaver(job, held, started, resume, store, xjob, log)
	saveCtx, stopSaving := context.WithCancel(context.WithoutCancel(ctx))
	saving := make(chan struct{})
	go func() {
		defer close(saving)
		saver.every(saveCtx)
	}()
	defer func() { stopSaving(); <-saving }()
	flushCtx, stopFlushing := context.WithCancel(context.WithoutCancel(ctx))
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		s.flushLogs(flushCtx, logs, events.LogSubject(held.Submitter, job, held.Attempt, held.Node), log)
	}()
	startSpan.End()
	runCtx, runSpan := trace.Child(ctx, "run job", attrs...)
	meter := gpu.StartMeter(s.gpus.probe, gpus.UUIDs(), time.Second)
	res, err := xjob.Run(runCtx)
	res.Usage.GPUs = meter.Stop()
	trace.End(runSpan, err)
	stopFlushing()
	<-flushed
	stopSaving()
	<-saving
	if err != nil {
		return fail("starting the job: %v", err)
	}
	// A node cut off may be given up as lost by now: nothing of the
	// attempt is stored (no output, no logs), its workspace is cleaned on
	// the way out, and the stop says why. The fence may come while the
	// output is stored, too: the storing stops then.
	fenced := func() bool { return causeOf(ctx) == errFenced }
	fencedStop := func(when string) events.RunStopped {
		stopped.Outcome, stopped.Reason, stopped.Usage = events.NodeLost, fencedReason+" "+when, res.Usage
		stopped.ExitCode, stopped.Logs = nil, nil
		stopped.Output = events.Collected{Files: []events.OutputFile{}, Missing: []string{}, Declared: spec.Output}
		return stopped
	}
	if fenced() {
		return fencedStop("while the job ran")
	}
	storing, stopStoring := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStoring()
	defer context.AfterFunc(ctx, func() {
		if fenced() {
			stopStoring()
		}
	})()
	stopped.Outcome, stopped.ExitCode, stopped.Reason, stopped.Usage = res.Outcome, res.ExitCode, res.Reason, res.Usage
	// The checkpoint once more, as the job left it: on every stop the node
	// survives (a fenced node gave the attempt up above).
	trigger := events.TriggerStop
	if causeOf(ctx) == errShutdown {
		trigger = events.TriggerShutdown
	}
	// In time, as the output below: a save still going when RENT would end
	// the attempt without the node's stop is given up.
	saveBy, cancelSave := context.WithDeadline(storing, reportBy(time.Now(), heldAt, limit, held.GraceSeconds))
	if why := saver.stopped(saveBy, trigger); why != "" {
		stopped.Reason = strings.TrimPrefix(stopped.Reason+"; "+why, "; ")
	}
	cancelSave()
	stopped.Logs = s.storeLogs(storing, logs, log)
	if res.Outcome == events.Cancelled && causeOf(ctx) == errShutdown {
		stopped.Outcome, stopped.Reason = events.NodeLost, "the node shut down while the job ran"
	}
	// Whatever the job left is returned, on every path, and in time: past
	// its hold's grace RENT ends the attempt without the node's stop, and
	// what it collected would be set aside, so a collection that would
	// run on is cut short and returned as far as it got.
	collectCtx, cancel := context.WithDeadline(storing, reportBy(time.Now(), heldAt, limit, held.GraceSeconds))
	defer cancel()
	// The job's declared disk bounds its output too; the node's bound is
	// for jobs that declare none.
	bound := spec.Request.DiskBytes
	if bound <= 0 {
		bound = s.cfg.MaxOutputBytes
	}
	var collected events.Collected
	collectCtx, uploadSpan := trace.Child(collectCtx, "run output upload", attrs...)
	err = again(collectCtx, log, "collecting output", tryOutput, func(ctx context.Context) (err error) {
		collected, err = stage.Collect(ctx, store, dirs.OutDir, spec.Output, bound)
		return err
	})
	uploadSpan.SetAttributes(attribute.Int64("e31.output.bytes", collected.Bytes), attribute.Int("e31.output.files", len(collected.Files)))
	trace.End(uploadSpan, err)
	tooLarge, size := errors.Is(err, stage.ErrOutputTooLarge) && collected.Bytes > bound, collected.Bytes
	if tooLarge {
		// Nothing was stored, and returning some of it would pass truncated
		// output off as complete: none is returned, and the reason says why.
		collected = events.Collected{}
	}
	collected.Declared = spec.Output
	if collected.Files == nil {
		collected.Files = []events.OutputFile{}
	}
	if collected.Missing == nil {
		collected.Missing = []string{}
	}
	if fenced() {
		return fencedStop("while the job's output was stored")
	}
	stopped.Output = collected
	if err != nil {
		reason := fmt.Sprintf("collecting output: %v", err)
		if tooLarge {
			reason = fmt.Sprintf("output is %d bytes, over the job's bound of %d (request.disk)", size, bound)
		}
		if stopped.Outcome == events.Succeeded {
			stopped.Outcome = events.Failed
			stopped.Reason = reason
		} else {
			stopped.Reason += "; " + reason
		}
	}
	return stopped
}

// again calls op until it succeeds, fails for a reason that does not pass
// by itself, or has failed for a while (retry.Step): a NATS server
// restarting, or a cluster electing a leader (retry.Transient), is no
// fault of the job and must not end it as failed. Each try gets at most
// try (no bound of its own if 0): a request sent to a server that then died
// is never answered, and nats.go waits for its answer until the request's
// context ends, so a try stuck so must be given up and made again on the
// server that is there now, not waited out to the step's deadline.
func again(ctx context.Context, log *slog.Logger, what string, try time.Duration, op func(context.Context) error) error {
	return retry.Do(ctx, retry.Step, func() error {
		if try <= 0 {
			return op(ctx)
		}
		tctx, cancel := context.WithTimeout(ctx, try)
		defer cancel()
		return op(tctx)
	}, retry.OnRetry(func(err error, in time.Duration) {
		log.Warn(what+" failed; trying again", "in", in, "err", err)
	}))
}

// How long one try of a step on the node may take before it is given up
// as stuck on a server that died (see again). A request answers in
// milliseconds; the bounds are for a loaded server, and for the bytes a
// try moves: a job's logs are capped, its output is not.
const (
	tryRequest = 15 * time.Second
	tryLogs    = 30 * time.Second
	tryOutput  = time.Minute
)

// HandleCancel stops the job if it runs on this node. A cancel for a job
// not started here is decided when its hold arrives (DecideStart).
func (s *Service) HandleCancel(_ context.Context, env events.Envelope) error {
	if c, ok := events.SweepCancel(env.Event); ok {
		s.cancelSweep(env, c) // sweep.go
		return nil
	}
	s.mu.Lock()
	r := s.running[env.Subject]
	s.mu.Unlock()
	c, _ := env.Event.(*events.CancelRequested)
	if r != nil && c != nil && !events.MayCancel(c.By, r.submitter) {
		s.log.Warn("ignoring a cancel from someone other than the submitter", "job", env.Subject, "by", c.By)
		return nil
	}
	if r != nil {
		s.log.Info("cancelling", "job", env.Subject, "attempt", r.attempt)
		r.cancel(errCancelRequested)
	}
	return nil
}
