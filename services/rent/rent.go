// Package rent is the RENT step: it keeps the pool (which nodes exist and
// what each has free) and holds compute for jobs when they fit, recording
// ComputeHeld, which starts the meter. Jobs that do not fit wait in the
// order they were submitted; nothing is dropped.
//
// RENT is a projection of the log: on start it replays every event into a
// Pool, then follows the log in order on one durable consumer. Every
// decision is appended only while the job's last event is the one the pool
// decided from, so a hold can never be made twice or after a cancel.
package rent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/e31net/e31/pkg/api"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// maxHoldsPerPass bounds the holds appended in one round trip.
const maxHoldsPerPass = 256

// Config configures the service.
type Config struct {
	Source string
	Logger *slog.Logger
	Now    func() time.Time
}

// Service is the RENT step. Run one instance at a time (a leader lease for
// several is future work); it rebuilds its state from the log on start.
type Service struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	pub *bus.Publisher
	log *slog.Logger

	mu       sync.Mutex
	pool     *Pool
	replayed uint64
	changed  chan struct{} // closed and replaced whenever the pool reads on

	// kick wakes the scheduler: something changed that may allow a decision.
	kick chan struct{}
}

// New returns a Service.
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Source == "" {
		cfg.Source = "e31/rent"
	}
	return &Service{nc: nc, js: js, pub: bus.NewPublisher(js, cfg.Source, cfg.Now),
		log: cfg.Logger.With("service", "rent"), pool: NewPool(), changed: make(chan struct{}), kick: make(chan struct{}, 1)}, nil
}

// Run rebuilds the pool from the log, then schedules until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Setup(ctx, s.js, events.StreamOptions{}); err != nil {
		return err
	}
	start := time.Now()
	last, err := bus.Replay(ctx, s.js, bus.ReplayOptions{Logger: s.log}, func(env events.Envelope) error {
		s.pool.Apply(env)
		return nil
	})
	if err != nil {
		return fmt.Errorf("rent: rebuild from the log: %w", err)
	}
	s.replayed = last
	s.log.Info("pool rebuilt from the log", "seq", last, "nodes", len(s.pool.nodes), "waiting", s.pool.queue.Len(), "took", time.Since(start).Round(time.Millisecond))

	svc, err := micro.AddService(s.nc, micro.Config{Name: "e31-rent", Version: "0.1.0", Description: "why a job waits"})
	if err != nil {
		return fmt.Errorf("rent: query service: %w", err)
	}
	defer svc.Stop()
	if err := svc.AddEndpoint("why", micro.HandlerFunc(s.why), micro.WithEndpointSubject(api.RentWhy)); err != nil {
		return fmt.Errorf("rent: query service: %w", err)
	}
	go s.scheduler(ctx)
	s.wake()
	return bus.Run(ctx, s.js, s.pub, "rent", s.log, bus.Handler{
		Name:  "rent",
		Topic: events.JobSubjects + " " + events.NodeSubjects,
		// One lane: the pool must see the log in order.
		Subscriber: bus.SubscriberConfig{Durable: "rent", Lanes: 1, MaxAckPending: 4096},
		Handle:     s.Handle,
	})
}

// Handle applies one event and wakes the scheduler.
//
// Events the rebuild already read are skipped. Any other event is applied,
// even one older than an event already applied: the pool applies its own
// decisions as soon as they are stored, ahead of events logged before them
// that this handler has yet to see. Apply is idempotent by state, so an
// event seen twice changes nothing.
//
// Deciding is not done here: the scheduler decides for everything applied
// so far in one pass and one round trip, so a burst of submissions is held
// in batches rather than one durable write at a time. Nothing is lost if
// RENT dies in between: on start it rebuilds the pool and decides again.
func (s *Service) Handle(_ context.Context, env events.Envelope) error {
	s.mu.Lock()
	if env.Seq > s.replayed {
		s.pool.Apply(env)
	}
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	s.wake()
	return nil
}

func (s *Service) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// scheduler appends the pool's decisions whenever it is woken, until ctx
// ends. A failed append is tried again after a pause.
func (s *Service) scheduler(ctx context.Context) {
	retry := time.NewTimer(0)
	<-retry.C
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-retry.C:
		}
		if err := s.schedule(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("scheduling failed; trying again", "in", backoff, "err", err)
			retry.Reset(backoff)
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
	}
}

// schedule appends the pool's decisions until it has none left that can be
// made now.
func (s *Service) schedule(ctx context.Context) error {
	for {
		s.mu.Lock()
		decisions := s.pool.Decide(maxHoldsPerPass)
		s.mu.Unlock()
		if len(decisions) == 0 {
			return nil
		}
		batch := make([]bus.Pending, len(decisions))
		for i, d := range decisions {
			batch[i] = bus.Pending{Subject: d.Job, Event: d.Event, Expect: d.Expect, ExpectSet: true}
		}
		stored, errs := s.pub.AppendBatch(ctx, batch)
		var failed []error
		applied := 0
		s.mu.Lock()
		for i, err := range errs {
			switch {
			case err == nil:
				s.pool.Apply(stored[i])
				applied++
				if h, ok := decisions[i].Event.(events.ComputeHeld); ok {
					s.log.Info("compute held", "job", decisions[i].Job, "node", h.Node, "attempt", h.Attempt, "seq", stored[i].Seq)
				} else {
					s.log.Info("job cancelled while waiting", "job", decisions[i].Job, "seq", stored[i].Seq)
				}
			case errors.Is(err, bus.ErrConflict):
				// The job moved on; the event that moved it is on its way to
				// this handler and the pool decides again then.
				s.log.Debug("decision overtaken", "job", decisions[i].Job, "err", err)
			default:
				failed = append(failed, err)
			}
		}
		s.mu.Unlock()
		if len(failed) > 0 {
			return fmt.Errorf("rent: %w", errors.Join(failed...))
		}
		if applied == 0 || len(decisions) < maxHoldsPerPass {
			return nil
		}
	}
}

func (s *Service) why(req micro.Request) {
	var q api.WhyRequest
	if err := json.Unmarshal(req.Data(), &q); err != nil || q.Job == "" {
		_ = req.RespondJSON(api.WhyReply{Error: "expected {\"job\": ID}"})
		return
	}
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		if s.pool.Applied() >= q.MinSeq {
			reply := s.pool.Why(q.Job)
			s.mu.Unlock()
			_ = req.RespondJSON(reply)
			return
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			_ = req.RespondJSON(api.WhyReply{Job: q.Job, Error: fmt.Sprintf("the scheduler has not read the log up to #%d yet", q.MinSeq)})
			return
		}
	}
}
