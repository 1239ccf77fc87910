package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/stage"
)

// DefaultDeleteGrace is how long after a deletion is recorded the objects
// it frees are removed from the store. Until then a job that reuses the
// same bytes (a client that found them stored and did not send them again,
// a node whose output matches them) has time to get its own reference into
// the log; its SUBMIT check or its collection takes far less.
const DefaultDeleteGrace = 15 * time.Minute

// DefaultKeepDeleted is how long OUTPUT remembers a job whose data and
// output are all deleted (the stored endpoint shows what went and when,
// `e31 data ls --deleted`), after the last deletion. Past it OUTPUT keeps
// nothing of the job: its hold record shows the deletions for ever.
const DefaultKeepDeleted = 24 * time.Hour

// Config configures retention.
type Config struct {
	// Publisher appends the Deleted events (OUTPUT's, so that they carry
	// its source).
	Publisher *bus.Publisher
	// Stores gives each submitter's data store, where the deleted objects
	// are.
	Stores stage.Stores
	Logger *slog.Logger
	Now    func() time.Time
	// DeleteGrace is the time between a deletion and the sweep that
	// removes the freed objects; default DefaultDeleteGrace.
	DeleteGrace time.Duration
	// Queries bounds what askers may hold of the stored endpoint at once
	// (zero fields: query's defaults).
	Queries query.Limits
	// KeepDeleted is how long a job whose data and output are all
	// deleted is remembered after its last deletion; default
	// DefaultKeepDeleted, and never less than DeleteGrace.
	KeepDeleted time.Duration
}

// Service keeps what jobs stored for as long as they may use it, and no
// longer. Any number may run: each keeps its own projection of the log
// (Refs), and timers and deletions are shared work.
type Service struct {
	js     jetstream.JetStream
	pub    *bus.Publisher
	log    *slog.Logger
	stores stage.Stores
	grace  time.Duration
	now    func() time.Time

	// tail reads the log into refs and says how far refs is: a waiter
	// takes its Changed channel before it reads refs.
	tail  *bus.Tail
	start time.Time // of the rebuild
	// from is where the rebuild began to read the log: 1, or a
	// checkpoint's From.
	from atomic.Uint64

	// mu guards refs.
	mu   sync.Mutex
	refs *Refs

	// sweepMu serializes sweeps, which share the object indexes, one per
	// store.
	sweepMu sync.Mutex
	index   map[stage.Store]*objectIndex

	queryLimits query.Limits
	queries     atomic.Pointer[query.Server] // set once Run serves queries (stored.go)
}

// New returns the retention of what jobs store in cfg.Stores.
func New(js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Stores == nil || cfg.Publisher == nil {
		return nil, errors.New("retention: Stores and a Publisher are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DeleteGrace <= 0 {
		cfg.DeleteGrace = DefaultDeleteGrace
	}
	if cfg.KeepDeleted <= 0 {
		cfg.KeepDeleted = DefaultKeepDeleted
	}
	// Remembered until swept, at least: a sweep of a job forgotten reads
	// the log, which is dearer.
	cfg.KeepDeleted = max(cfg.KeepDeleted, cfg.DeleteGrace)
	s := &Service{
		js: js, pub: cfg.Publisher, log: cfg.Logger, stores: cfg.Stores, grace: cfg.DeleteGrace, now: cfg.Now,
		refs: NewRefs(), index: map[stage.Store]*objectIndex{},
		queryLimits: cfg.Queries,
	}
	s.refs.Forget(cfg.KeepDeleted)
	s.tail = s.newTail()
	return s, nil
}

// Tracked is how many jobs the projection keeps: those within their
// retention, and those deleted less than KeepDeleted ago.
func (s *Service) Tracked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refs.Tracked()
}

// ReadFrom is where this start's rebuild of the projection began to read
// the log: 1, or the From of the checkpoint it found (0 until Run found
// out).
func (s *Service) ReadFrom() uint64 { return s.from.Load() }

// CaughtUp is closed once this start's projection has read the log as far
// as it went when Run began: from then on the projection is whole, and Run
// writes its checkpoints.
func (s *Service) CaughtUp() <-chan struct{} { return s.tail.CaughtUp() }

// Run serves the stored endpoint, follows the log into the projection and
// handles the timers until ctx ends, or until one of them cannot go on:
// the first to fail ends the others, and Run returns its error.
func (s *Service) Run(ctx context.Context) error {
	checkpoints, err := events.OpenBucket(ctx, s.js, events.OutputBucketConfig(events.StreamOptions{}))
	if err != nil {
		return fmt.Errorf("retention: checkpoints: %w", err)
	}
	from, made, err := s.restore(ctx, checkpoints)
	if err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	s.from.Store(from)
	stopAPI, err := s.serveAPI()
	if err != nil {
		return err
	}
	defer stopAPI()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.follow(ctx); err != nil && ctx.Err() == nil {
			return fmt.Errorf("retention: follow the log: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		select {
		case <-s.tail.CaughtUp():
		case <-ctx.Done():
			return nil
		}
		s.checkpoints(ctx, checkpoints, made)
		return nil
	})
	g.Go(func() error { return s.runTimers(ctx) })
	return g.Wait()
}
