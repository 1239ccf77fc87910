// Package rent is the RENT step: it keeps the pool (which nodes exist and
// what each has free) and holds compute for jobs when they fit, recording
// ComputeHeld, which starts the meter. Jobs that do not fit wait; nothing is
// dropped. The order, fair share and backfill are in Pool, and in its
// parts: the queue (queue.go), placement (place.go), a node's GPUs by
// device (devices.go), what it forgets (forget.go) and why a job waits
// (why.go).
//
// A placement is the pool's decision to hold compute for a waiting job on
// a node, appended as ComputeHeld; once that is applied the job is placed
// (its status is "held") and is one of its node's jobs until
// ComputeReleased. "Hold" is left to the events (events.Hold, the attempt
// that ComputeHeld, HoldLost and ComputeReleased name) and to the ledger's
// record of what a job held (pkg/hold).
//
// RENT is a projection of the log: on start it reads every event into a
// Pool, and decides only once it has caught up; then it follows the log in
// order (bus.Tail), from where it is, on every instance. Every
// decision is appended only while the job's last event is the one the pool
// decided from, so a hold can never be made twice or after a cancel.
//
// The pool keeps the jobs that wait or hold, and of those that ended only
// the last PoolConfig.RememberEnded: what it keeps is bounded by the jobs
// live, not by the history. A job that runs after one it forgot has that
// job's outcome read from the log (resolve).
//
// Several instances may run. Exactly one decides at a time: it holds the
// leader lease in the leases bucket and stops deciding the moment it cannot
// prove it still holds it. The others keep their pools warm and take over
// within a lease time when it dies.
//
// Run nodes keep leases of their own. When one lapses, the leader waits
// the lapse margin more (Config.LapseMargin: see pkg/lease, which says why),
// then records NodeExpired, and HoldLost for every attempt held on that node
// that had not stopped; RELEASE then releases them and the jobs are held
// again. A node cut off stops its own jobs before its lease can lapse, so
// the margin puts every one of them dead before the next hold.
package rent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	oteltrace "go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/lease"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/retry"
	"github.com/e31net/e31/pkg/trace"
)

// maxPlacementsPerPass bounds the placements (ComputeHeld) appended in one
// round trip.
const maxPlacementsPerPass = 256

// leaderKey is the leader lease in the leases bucket.
const leaderKey = "leader.rent"

// Observer is told what the scheduler does. Its methods are called from
// the scheduler's loop and the leader lease's, and must not block.
type Observer interface {
	// Decided: one call of the pool's decision took took.
	Decided(took time.Duration)
	// Waiting: the queue, by submitter, after a pass (every instance's,
	// the standbys' too).
	Waiting(depth map[string]int)
	// Leading: whether this instance decides.
	Leading(leading bool)
}

// nopObserver watches nothing.
type nopObserver struct{}

func (nopObserver) Decided(time.Duration)  {}
func (nopObserver) Waiting(map[string]int) {}
func (nopObserver) Leading(bool)           {}

// Service is the RENT step.
type Service struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	pub      *bus.Publisher
	log      *slog.Logger
	instance string
	now      func() time.Time

	// tail reads the log into pool and says how far it has read: a
	// waiter takes its Changed channel before it reads the pool.
	tail *bus.Tail

	mu     sync.Mutex
	pool   *Pool
	leader *lease.Lease // non-nil while this instance leads
	// expiring are the nodes whose lease this instance saw gone, to be
	// recorded lost once the lapse margin has passed.
	expiring    map[string]lapse
	lapseMargin time.Duration
	// traces is the trace context of the last event of each live job that
	// had one: the pool decides later, apart from any handler, and what it
	// appends must stay in the job's trace.
	traces map[string]events.Trace
	// own holds the sequences of the events this instance appended and
	// applied already that the tail has yet to read, and read the last
	// sequence the tail has taken: see follow.
	own  map[uint64]struct{}
	read uint64

	// kick wakes the scheduler: something changed that may allow a decision.
	kick chan struct{}
	// unresolved wakes resolve: the pool waits for the outcome of a job it
	// forgot (Pool.Unresolved).
	unresolved chan struct{}

	queryLimits query.Limits
	queries     atomic.Pointer[query.Server] // set once Run serves queries

	obs     Observer
	rebuilt atomic.Bool // the pool was rebuilt from the log: a warm standby at least
}

// New returns a Service.
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Source == "" {
		cfg.Source = events.DefaultSource("rent")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Instance == "" {
		cfg.Instance, _ = os.Hostname()
	}
	instance := sanitize(cfg.Instance)
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.LapseMargin < 0 {
		return nil, fmt.Errorf("rent: lapse margin %s: it must not be negative, or a node could be counted lost before its lease expired", cfg.LapseMargin)
	}
	if err := cfg.readCards(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("service", "rent", "instance", instance)
	if cfg.Pool.SetAside == nil {
		cfg.Pool.SetAside = func(env events.Envelope, heldOn string) {
			log.Warn("setting aside an event from a node the attempt is not held on", "job", env.Subject,
				"event", events.Name(env.Type), "attempt", env.Attempt(), "held_on", heldOn, "seq", env.Seq)
		}
	}
	s := &Service{obs: cfg.Observer, nc: nc, js: js, pub: bus.NewPublisher(js, cfg.Source, cfg.Now), now: cfg.Now,
		log: log, instance: instance,
		pool: NewPool(cfg.Pool, cfg.Now), expiring: map[string]lapse{}, lapseMargin: cfg.LapseMargin, traces: map[string]events.Trace{}, own: map[uint64]struct{}{},
		kick: make(chan struct{}, 1), unresolved: make(chan struct{}, 1), queryLimits: cfg.Queries}
	// Named after the instance, so that its backlog is watched like a
	// durable consumer's (e31_consumer_pending{service="rent"}).
	s.tail = bus.NewTail(js, bus.TailOptions{Name: "rent-" + instance, Service: "rent", Logger: s.log})
	return s, nil
}

// sanitize makes s usable in a consumer name.
func sanitize(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
	if s == "" {
		s = "rent"
	}
	return s
}

// Run rebuilds the pool from the log, then follows it and, while it leads,
// schedules, until ctx ends. Everything Run starts ends with it: the first
// to fail ends the rest and Run returns its error, and the leader lease is
// given up on the way out, so that a standby decides at once rather than
// after the lease lapses.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Setup(ctx, s.js, events.StreamOptions{}); err != nil {
		return err
	}
	kv, err := s.js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		return fmt.Errorf("rent: leases: %w", err)
	}
	ttl, err := lease.TTL(ctx, kv)
	if err != nil {
		return fmt.Errorf("rent: %w", err)
	}
	if s.lapseMargin == 0 {
		s.lapseMargin = lease.DefaultMargins(ttl).Lapse
	}
	s.dropOldConsumer(ctx)
	start := time.Now()
	checkpoints, err := s.js.KeyValue(ctx, events.RentBucket)
	if err != nil {
		return fmt.Errorf("rent: checkpoints: %w", err)
	}
	from, made, err := s.restore(ctx, checkpoints)
	if err != nil {
		return fmt.Errorf("rent: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// Not Again: a pool that stopped following the log must not go on
		// deciding from it. Run ends instead, and a standby takes over.
		err := s.tail.Run(ctx, s.follow(bus.ObserverFrom(ctx)))
		if err == nil && ctx.Err() == nil {
			err = errors.New("the reading of the log stopped")
		}
		if err != nil {
			return fmt.Errorf("rent: follow the log: %w", err)
		}
		return nil
	})
	g.Go(func() error { s.resolve(ctx); return nil })
	select {
	case <-s.tail.CaughtUp():
	case <-ctx.Done():
		return g.Wait()
	}
	s.obs.Leading(false)
	s.rebuilt.Store(true)
	defer s.rebuilt.Store(false)
	s.mu.Lock()
	s.log.Info("pool rebuilt from the log", "from", from, "seq", s.tail.Applied(), "nodes", s.pool.Nodes(), "waiting", s.pool.Waiting(), "took", time.Since(start).Round(time.Millisecond))
	s.mu.Unlock()
	g.Go(func() error { s.checkpoints(ctx, checkpoints, made); return nil })

	// Served for every user, e31.api.*.rent.why: the user is read from the
	// subject each request came on.
	queries := query.New(s.nc, query.Config{Name: "e31-rent", Version: "0.2.0", Description: "why a job waits", Limits: s.queryLimits, Logger: s.log})
	queries.Handle(wire.EndpointWhy, wire.RentWhySubject("*"), s.why)
	if err := queries.Start(ctx); err != nil {
		cancel()
		return errors.Join(fmt.Errorf("rent: %w", err), g.Wait())
	}
	s.queries.Store(queries)
	defer queries.Stop()
	// The scheduler's first pass waits for the node leases as they are:
	// a node the log knows whose lease is gone (it stopped while RENT
	// was down) is counted lost before anything is held on it.
	leasesRead := make(chan struct{})
	g.Go(func() error { s.watchNodes(ctx, g, kv, leasesRead); return nil })
	g.Go(func() error { s.sweepNodes(ctx, kv); return nil })
	g.Go(func() error { s.lead(ctx, kv); return nil })
	g.Go(func() error {
		select {
		case <-leasesRead:
		case <-ctx.Done():
			return nil
		}
		s.scheduler(ctx)
		return nil
	})
	s.wake()
	return g.Wait()
}

// observed is Handle, timed for o (when there is one) as the handler
// "rent" once the pool is rebuilt: what comes after the rebuild is what
// RENT handles, as a step's handler does.
func (s *Service) observed(o bus.Observer) func(context.Context, events.Envelope) error {
	if o == nil {
		return s.Handle
	}
	return func(ctx context.Context, env events.Envelope) error {
		start := time.Now()
		err := s.Handle(ctx, env)
		if s.tail.Live() {
			o.Handled("rent", "rent", time.Since(start), err)
		}
		return err
	}
}

// follow is the tail's Apply: every message counted as its job's last
// (touch), and every event the pool applies decoded and handled, in order,
// except the events this instance appended itself, which schedule applied
// the moment they were stored. Decoding those again (a ComputeHeld carries
// the job's whole spec) would be a third of the leader's reading for
// nothing: the pool would find them applied already.
func (s *Service) follow(o bus.Observer) bus.Apply {
	decoded := bus.Decoded(s.log, s.observed(o))
	var skip []bool
	return func(ctx context.Context, msgs []*jetstream.RawStreamMsg) error {
		skip = slices.Grow(skip[:0], len(msgs))[:len(msgs)]
		s.mu.Lock()
		for i, m := range msgs {
			_, skip[i] = s.own[m.Sequence]
			delete(s.own, m.Sequence)
		}
		// From here on schedule leaves what it stores at or below this to
		// the tail: the tail has it in hand.
		s.read = max(s.read, msgs[len(msgs)-1].Sequence)
		s.mu.Unlock()
		moved := false
		for i, m := range msgs {
			if skip[i] {
				continue
			}
			apply, touched := s.touch(m)
			moved = moved || touched
			if !apply {
				continue
			}
			if err := decoded(ctx, msgs[i:i+1]); err != nil {
				return err
			}
		}
		if moved {
			// A decision made before one of these was read conflicted
			// and waits to be made again. Handle wakes the scheduler for
			// the events it applies; a message the pool does not apply
			// (a request, a deletion, a tenant's junk) would wake no one,
			// and the job would wait for an unrelated event to be held.
			s.wake()
		}
		return nil
	}
}

// unapplied are the event types the pool does nothing with, whose bodies
// are not decoded: JobRequested, a job's whole spec, is an eighth of the
// log and the largest of its bodies, and the job is the pool's only once
// SUBMIT accepted it (JobSubmitted carries the spec again); a deletion
// comes once a job's data or output is no longer wanted and decides
// nothing about compute.
var unapplied = map[string]bool{
	events.TypeJobRequested:    true,
	events.TypeDeleteRequested: true,
	events.TypeDeleted:         true,
}

// touch counts m as the last message of its job, if it is on a job's
// subjects (Pool.Touch), whatever it holds, and reports whether it is of
// a type the pool applies, by its type header (one that says otherwise is
// no event the pool would apply either, since Decode refuses an event on
// another type's subject), and whether it moved a known job's last.
func (s *Service) touch(m *jetstream.RawStreamMsg) (apply, moved bool) {
	if subject, err := events.ParseSubject(m.Subject); err == nil && subject.Space == events.SpaceJob {
		s.mu.Lock()
		moved = s.pool.Touch(subject.Job, m.Sequence)
		s.mu.Unlock()
	}
	return !unapplied[m.Header.Get(events.HeaderType)], moved
}

// dropOldConsumer deletes the durable consumer earlier versions followed
// the log with: nothing reads it any more, and left alone it would keep
// its state on the server for a day.
func (s *Service) dropOldConsumer(ctx context.Context) {
	name := bus.ConsumerName("rent-"+s.instance, events.JobSubjects+" "+events.NodeSubjects)
	if err := s.js.DeleteConsumer(ctx, events.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.log.Warn("could not delete the old durable consumer", "consumer", name, "err", err)
	}
}

// Handle applies one event and wakes the scheduler.
//
// Any event is applied, even one older than an event already applied: the
// pool applies its own decisions as soon as they are stored, ahead of
// events logged before them that the tail has yet to read. Apply is
// idempotent by state, so an event seen twice changes nothing.
//
// Deciding is not done here: the scheduler decides for everything applied
// so far in one pass and one round trip, so a burst of submissions is held
// in batches rather than one durable write at a time. Nothing is lost if
// RENT dies in between: on start it rebuilds the pool and decides again.
func (s *Service) Handle(_ context.Context, env events.Envelope) error {
	s.mu.Lock()
	s.pool.Apply(env)
	s.remember(env)
	if e, ok := env.Event.(*events.NodeExpired); ok && s.expiring[e.Node].boot == e.Boot {
		// Recorded by the leader: a standby that saw the lapse too has
		// nothing left to record when it leads.
		delete(s.expiring, e.Node)
	}
	unresolved := s.pool.HasUnresolved()
	s.mu.Unlock()
	s.noteCard(env)
	if unresolved {
		select {
		case s.unresolved <- struct{}{}:
		default:
		}
	}
	s.wake()
	return nil
}

// resolve reads from the log the outcome of every job the pool waits to
// hear of (Pool.Unresolved: a job that jobs run after, forgotten long after
// it ended, or not accepted yet), until ctx ends. Jobs are rarely run after
// one so old, so this is rare work: one job's history each time.
func (s *Service) resolve(ctx context.Context) {
	again := time.NewTimer(time.Hour)
	again.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.unresolved:
		case <-again.C:
		}
		s.mu.Lock()
		ids := s.pool.Unresolved()
		s.mu.Unlock()
		for _, id := range ids {
			history, err := bus.ReadJob(ctx, s.js, id, 1)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("reading the outcome of a job others run after; trying again", "job", id, "err", err)
				again.Reset(time.Second)
				break
			}
			ended, outcome, returned := events.FinalOutput(history)
			var bytes int64
			if returned != nil {
				bytes = returned.Bytes
			}
			s.mu.Lock()
			s.pool.Resolve(id, ended, outcome, bytes)
			s.mu.Unlock()
			if ended {
				s.log.Info("outcome of a job others run after read from the log", "job", id, "outcome", outcome)
				s.wake()
			}
		}
	}
}

// remember keeps the trace context env carries as its job's until the job
// ends. The pool takes note of every event of every job without a span of
// its own (one each would be most of a trace's cost and say nothing); its
// decisions are the spans (decisionSpans). Called with s.mu held.
func (s *Service) remember(env events.Envelope) {
	if !s.pool.Live(env.Subject) {
		// Over, or not a job: nothing will be decided for it.
		delete(s.traces, env.Subject)
		return
	}
	switch e := env.Event.(type) {
	case *events.NodeAnnounced, *events.NodeExpired:
		return
	case *events.JobRejected, *events.JobCancelled:
		delete(s.traces, env.Subject)
		return
	case *events.ComputeReleased:
		if e.Final {
			delete(s.traces, env.Subject)
			return
		}
	}
	if env.Trace.Parent != "" {
		s.traces[env.Subject] = env.Trace
	}
}

func (s *Service) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// lead takes the leader lease when it is free and keeps it until ctx ends
// or it is lost; then it waits for the lease to be free again.
func (s *Service) lead(ctx context.Context, kv jetstream.KeyValue) {
	for ctx.Err() == nil {
		l, err := lease.Acquire(ctx, kv, leaderKey, s.instance)
		if err == nil {
			s.mu.Lock()
			s.leader = l
			s.mu.Unlock()
			s.obs.Leading(true)
			s.log.Info("leading: this instance decides")
			s.wake()
			// Woken when a renewal makes the lease valid again after a
			// gap (a NATS server lost, a leader elected): decisions that
			// the gap held back are made then, not at the next event.
			err = l.Keep(ctx, s.wake)
			s.mu.Lock()
			s.leader = nil
			s.mu.Unlock()
			s.obs.Leading(false)
			if ctx.Err() != nil {
				release, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if err := l.Release(release); err != nil {
					s.log.Warn("giving up the leader lease; a standby takes over when it lapses", "err", err)
				} else {
					s.log.Info("leader lease given up")
				}
				cancel()
				return
			}
			s.log.Warn("leadership lost: this instance stops deciding", "err", err)
			continue
		}
		if !errors.Is(err, lease.ErrHeld) {
			s.log.Warn("taking the leader lease", "err", err)
		}
		s.waitFree(ctx, kv)
	}
}

// waitFree returns when the leader lease is free (deleted or expired), or
// after a lease time at most.
func (s *Service) waitFree(ctx context.Context, kv jetstream.KeyValue) {
	ttl, err := lease.TTL(ctx, kv)
	if err != nil {
		ttl = events.DefaultLeaseTTL
	}
	wctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	w, err := kv.Watch(wctx, leaderKey)
	if err != nil {
		<-wctx.Done()
		return
	}
	// Stop's error says only that the watch had ended already.
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-wctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				return
			}
		}
	}
}

// Ready reports whether this instance is leading or a warm standby: its
// pool rebuilt from the log and followed. Whether its consumer keeps up is
// for the process to check (daemon.Endpoints).
func (s *Service) Ready(context.Context) error {
	if !s.rebuilt.Load() {
		return errors.New("rent: rebuilding the pool from the log")
	}
	return nil
}

// leading reports whether this instance may decide now.
func (s *Service) leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader != nil && s.leader.Valid()
}

// watchNodes follows the node leases. A lease that disappears means its
// node is lost; a node the log knows that holds no lease when this instance
// starts is lost too, unless it renews within a lease time.
//
// It closes read once it has seen every lease there was when it started.
func (s *Service) watchNodes(ctx context.Context, g *errgroup.Group, kv jetstream.KeyValue, read chan<- struct{}) {
	var once sync.Once
	ttl, err := lease.TTL(ctx, kv)
	if err != nil {
		ttl = events.DefaultLeaseTTL
	}
	for ctx.Err() == nil {
		w, err := retry.Value(ctx, retry.Watch, func() (jetstream.KeyWatcher, error) { return kv.Watch(ctx, "node.*") },
			retry.If(retry.Always), retry.OnRetry(func(err error, in time.Duration) {
				s.log.Warn("watching node leases failed; trying again", "in", in, "err", err)
			}))
		if err != nil {
			return
		}
		live := map[string]bool{}
		for e := range w.Updates() {
			if e == nil {
				once.Do(func() { close(read) })
				// The current leases are all in: nodes without one get a lease
				// time to show up.
				s.mu.Lock()
				var missing []string
				for _, name := range s.pool.Leased() {
					if !live[name] {
						missing = append(missing, name)
					}
				}
				s.mu.Unlock()
				if len(missing) > 0 {
					g.Go(func() error {
						select {
						case <-ctx.Done():
						case <-time.After(ttl):
							for _, name := range missing {
								s.checkNode(ctx, kv, name)
							}
						}
						return nil
					})
				}
				continue
			}
			name := strings.TrimPrefix(e.Key(), "node.")
			if e.Operation() == jetstream.KeyValuePut {
				live[name] = true
				continue
			}
			delete(live, name)
			s.nodeGone(name)
		}
		_ = w.Stop()
	}
}

// sweepNodes looks up the lease of every node the pool counts live, once
// per lease time, apart from the watcher. A KV watcher does not survive a
// NATS server restart (nats.go v1.56 does not make its consumer again), and
// a node whose lease lapsed unseen would keep its jobs placed for ever.
func (s *Service) sweepNodes(ctx context.Context, kv jetstream.KeyValue) {
	ttl, err := lease.TTL(ctx, kv)
	if err != nil {
		ttl = events.DefaultLeaseTTL
	}
	tick := time.NewTicker(ttl)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		live := s.pool.Leased()
		s.mu.Unlock()
		for _, name := range live {
			s.checkNode(ctx, kv, name)
		}
	}
}

// checkNode counts a node lost if it still holds no lease.
func (s *Service) checkNode(ctx context.Context, kv jetstream.KeyValue, name string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := kv.Get(ctx, "node."+name); errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		s.nodeGone(name)
	}
}

// lapse is a node's boot whose lease this instance saw gone, and when the
// lapse margin after the first sighting ends, on this instance's monotonic
// clock: the node may be recorded lost from then on.
type lapse struct {
	boot string
	due  time.Time
}

// nodeGone marks a node's current boot for the leader to record as expired
// once the lapse margin has passed. A lease is seen gone at its expiry or
// later (the delete marker comes after the expiry, a sweep later still), so
// counting the margin from the first sighting is never early. Each
// instance counts from its own sighting: a standby that leads meanwhile
// records no sooner than its own margin allows.
func (s *Service) nodeGone(name string) {
	s.mu.Lock()
	if boot, ok := s.pool.LeasedBoot(name); ok && s.expiring[name].boot != boot {
		s.expiring[name] = lapse{boot: boot, due: time.Now().Add(s.lapseMargin)}
	}
	s.mu.Unlock()
	s.wake()
}

// scheduler appends the pool's decisions whenever it is woken, until ctx
// ends. A failed append is tried again after a pause.
func (s *Service) scheduler(ctx context.Context) {
	again := time.NewTimer(time.Hour)
	again.Stop()
	// lapsed wakes the scheduler when the margin of a lapse it saw ends.
	lapsed := time.NewTimer(time.Hour)
	lapsed.Stop()
	due := time.NewTimer(time.Hour)
	due.Stop()
	pauses := retry.Schedule.BackOff()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-again.C:
		case <-lapsed.C:
		case <-due.C:
		}
		err := s.schedule(ctx)
		if next, ok := s.nextLapse(); ok {
			lapsed.Reset(time.Until(next))
		}
		s.armDue(due)
		s.mu.Lock()
		depth := s.pool.WaitingBySubmitter()
		s.mu.Unlock()
		s.obs.Waiting(depth)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			pause := pauses.NextBackOff()
			s.log.Warn("scheduling failed; trying again", "in", pause, "err", err)
			again.Reset(pause)
			continue
		}
		pauses.Reset()
	}
}

// schedule records lapsed nodes, then appends the pool's decisions until it
// has none left that can be made now. Only the leader decides.
func (s *Service) schedule(ctx context.Context) error {
	if !s.leading() {
		return nil
	}
	if err := s.recordExpired(ctx); err != nil {
		return err
	}
	for {
		if !s.leading() {
			return nil
		}
		s.mu.Lock()
		began := time.Now()
		decisions := s.pool.Decide(maxPlacementsPerPass)
		s.obs.Decided(time.Since(began))
		s.mu.Unlock()
		if len(decisions) == 0 {
			return nil
		}
		batch := make([]bus.Pending, len(decisions))
		spans := s.decisionSpans(ctx, decisions, batch)
		for i, d := range decisions {
			batch[i].Subject, batch[i].Event, batch[i].Expect, batch[i].ExpectSet = d.Job, d.Event, d.Expect, true
		}
		stored, errs := s.pub.AppendBatch(ctx, batch)
		for i, sp := range spans {
			trace.End(sp, errs[i])
		}
		var failed []error
		applied, placements := 0, 0
		s.mu.Lock()
		for i, err := range errs {
			switch {
			case err == nil:
				s.pool.Apply(stored[i])
				s.remember(stored[i])
				if stored[i].Seq > s.read {
					s.own[stored[i].Seq] = struct{}{}
				}
				applied++
				s.logDecision(decisions[i], stored[i])
				if _, ok := decisions[i].Event.(*events.ComputeHeld); ok {
					placements++
				}
			case errors.Is(err, bus.ErrConflict):
				// The job moved on; the message that moved it is on its way
				// to the tail, which wakes the scheduler once it has counted
				// it (follow), and the pool decides again then.
				s.log.Debug("decision overtaken", "job", decisions[i].Job, "err", err)
			default:
				failed = append(failed, err)
			}
		}
		s.mu.Unlock()
		if len(failed) > 0 {
			return fmt.Errorf("rent: %w", errors.Join(failed...))
		}
		if applied == 0 || placements < maxPlacementsPerPass {
			return nil
		}
	}
}

// nextLapse is when the earliest lapse margin still running ends.
func (s *Service) nextLapse() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, l := range s.expiring {
		if next.IsZero() || l.due.Before(next) {
			next = l.due
		}
	}
	return next, !next.IsZero()
}

// recordExpired appends NodeExpired for every node whose lease lapsed at
// least the lapse margin ago.
func (s *Service) recordExpired(ctx context.Context) error {
	now := time.Now()
	s.mu.Lock()
	pending := make(map[string]string, len(s.expiring))
	for n, l := range s.expiring {
		if !now.Before(l.due) {
			pending[n] = l.boot
		}
	}
	s.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	kv, err := s.js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		return fmt.Errorf("rent: leases: %w", err)
	}
	for name, boot := range pending {
		// The boot marked is the pool's when the lease was seen gone: a
		// node that joined again meanwhile (its lease claimed, then its
		// announcement read) may be marked for the lease of its former
		// boot. A lease held under the boot says the node lives.
		if e, err := kv.Get(ctx, "node."+name); err == nil && string(e.Value()) == boot {
			s.mu.Lock()
			if s.expiring[name].boot == boot {
				delete(s.expiring, name)
			}
			s.mu.Unlock()
			continue
		} else if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
			return fmt.Errorf("rent: lease of node %s: %w", name, err)
		}
		// The leases bucket holds a copy of the lease the node renews in
		// its own bucket, and the copying can stall (a server that
		// sourced it killed) while the node renews on: its leader's word
		// on the node's own bucket decides. Counted lost on the copy
		// alone, a node that runs its jobs would see them held again
		// elsewhere, twice at once.
		if lives, err := s.ownLeaseLives(ctx, name, boot); err != nil {
			return fmt.Errorf("rent: lease of node %s in its own bucket: %w", name, err)
		} else if lives {
			s.log.Warn("a node's lease is gone from the leases bucket but not from the nodes' own: the copying lags; the node is not counted lost",
				"node", name, "boot", boot)
			s.mu.Lock()
			if s.expiring[name].boot == boot {
				s.expiring[name] = lapse{boot: boot, due: time.Now().Add(s.lapseMargin)}
			}
			s.mu.Unlock()
			continue
		}
		env, err := s.pub.Append(ctx, name, &events.NodeExpired{Node: name, Boot: boot,
			Reason: "its lease was not renewed in time: the node is counted lost until it announces itself again"})
		if err != nil {
			return fmt.Errorf("rent: record node %s expired: %w", name, err)
		}
		s.log.Warn("node lost: its lease lapsed", "node", name, "boot", boot, "seq", env.Seq)
		s.mu.Lock()
		s.pool.Apply(env)
		if s.expiring[name].boot == boot {
			delete(s.expiring, name)
		}
		s.mu.Unlock()
	}
	return nil
}

// ownLeaseLives reports whether the node's own bucket
// (events.NodeLeasesBucket), as its stream's leader has it, holds the
// node's lease under boot: a replica that lags, or was cut off and has
// expired what it held by its own clock, would say no for a node that
// lives.
func (s *Service) ownLeaseLives(ctx context.Context, name, boot string) (bool, error) {
	m, err := bus.LeaderLast(ctx, s.js, events.KVStream(events.NodeLeasesBucket), events.NodeLeaseSubject(name))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	if op := m.Header.Get("KV-Operation"); op != "" {
		return false, nil // deleted or purged: given up
	}
	return string(m.Data) == boot, nil
}

// decisionSpans sets the trace each decision carries, its job's, and when
// spans are exported starts a span for each decision (ended by the caller
// once appended), so that what the pool decided shows in the job's trace
// as RENT's work.
func (s *Service) decisionSpans(ctx context.Context, decisions []Decision, batch []bus.Pending) []oteltrace.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !trace.Enabled() {
		for i, d := range decisions {
			batch[i].Trace = s.traces[d.Job]
		}
		return nil
	}
	spans := make([]oteltrace.Span, len(decisions))
	for i, d := range decisions {
		env := events.New(d.Job, d.Event, "", time.Time{})
		env.Trace = s.traces[d.Job]
		var sctx context.Context
		sctx, spans[i] = trace.Tracer().Start(trace.Context(ctx, env.Trace), "rent decide "+events.Name(env.Type),
			oteltrace.WithAttributes(trace.JobAttributes(env)...), oteltrace.WithAttributes(trace.KeyService.String("rent")))
		batch[i].Trace = trace.Of(sctx)
	}
	return spans
}

func (s *Service) logDecision(d Decision, stored events.Envelope) {
	switch e := d.Event.(type) {
	case *events.ComputeHeld:
		s.log.Info("compute held", "job", d.Job, "node", e.Node, "attempt", e.Attempt, "seq", stored.Seq)
	case *events.JobCancelled:
		s.log.Info("job cancelled before it was held", "job", d.Job, "seq", stored.Seq)
	case *events.JobRejected:
		s.log.Info("job rejected", "job", d.Job, "reason", e.Reason, "seq", stored.Seq)
	case *events.HoldLost:
		s.log.Warn("attempt lost with its node", "job", d.Job, "node", e.Node, "attempt", e.Attempt, "seq", stored.Seq)
	}
}

// why answers why a job is where it is. A submitter is told about its own
// waiting and held jobs only; about any other job it is told what it would
// be told about one the scheduler has never seen; and never how many jobs
// wait in all.
func (s *Service) why(r *query.Request) {
	var q wire.WhyRequest
	if err := json.Unmarshal(r.Data(), &q); err != nil || q.Job == "" {
		r.Respond(wire.WhyReply{Error: "expected {\"job\": ID}"})
		return
	}
	deadline := r.Deadline(5 * time.Second)
	for {
		applied, ch := s.tail.Changed()
		if applied >= q.MinSeq {
			s.mu.Lock()
			reply := s.pool.WhyFor(q.Job, r.User, r.SeesAll())
			s.mu.Unlock()
			r.Respond(reply)
			return
		}
		changed, err := r.Await(ch, deadline)
		if err != nil {
			r.Busy(err)
			return
		}
		if !changed {
			r.Respond(wire.WhyReply{Job: q.Job, Error: fmt.Sprintf("the scheduler has not read the log up to #%d yet", q.MinSeq)})
			return
		}
	}
}

// QueryStats are the counts of the why endpoint: requests refused for
// their reply subject, answered busy, served. Zero until Run serves it.
func (s *Service) QueryStats() query.Stats {
	if q := s.queries.Load(); q != nil {
		return q.Stats()
	}
	return query.Stats{}
}
