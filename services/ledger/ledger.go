// Package ledger is the LEDGER: it projects the event log into one hold
// record per job (DESIGN.md's public record) and answers queries about them.
// It is rebuilt from the log on every start and answers while it catches up,
// saying how far it has read; a query can ask it to wait until it has
// applied a given sequence, so that a client that saw an event reads a
// record that includes it.
package ledger

import (
	"context"
	"encoding/json"
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

// Config configures the service.
type Config struct {
	Source string
	Logger *slog.Logger
}

// Service is the LEDGER. Several may run; each keeps its own projection.
type Service struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	pub  *bus.Publisher
	log  *slog.Logger
	name string

	mu       sync.Mutex
	proj     *Projection
	changed  chan struct{} // closed and replaced whenever proj moves on
	caughtUp bool
}

// New returns a Service.
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Source == "" {
		cfg.Source = "e31/ledger"
	}
	return &Service{nc: nc, js: js, pub: bus.NewPublisher(js, cfg.Source, nil), log: cfg.Logger.With("service", "ledger"),
		proj: NewProjection(), changed: make(chan struct{})}, nil
}

// Run serves queries at once, rebuilds the records from the log, then
// follows it until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Setup(ctx, s.js, events.StreamOptions{}); err != nil {
		return err
	}
	svc, err := micro.AddService(s.nc, micro.Config{Name: "e31-ledger", Version: "0.1.0", Description: "hold records"})
	if err != nil {
		return fmt.Errorf("ledger: query service: %w", err)
	}
	defer svc.Stop()
	for subject, h := range map[string]micro.HandlerFunc{
		api.LedgerRecord:      s.serveRecord,
		api.LedgerList:        s.serveList,
		api.LedgerInfoSubject: s.serveInfo,
	} {
		name := subject[len("e31.api.ledger."):]
		if err := svc.AddEndpoint(name, h, micro.WithEndpointSubject(subject)); err != nil {
			return fmt.Errorf("ledger: endpoint %s: %w", subject, err)
		}
	}
	start := time.Now()
	if _, err := bus.Replay(ctx, s.js, bus.ReplayOptions{Logger: s.log}, s.apply); err != nil {
		return fmt.Errorf("ledger: rebuild from the log: %w", err)
	}
	s.mu.Lock()
	s.caughtUp = true
	n, applied := len(s.proj.records), s.proj.Applied()
	s.mu.Unlock()
	s.log.Info("records rebuilt from the log", "records", n, "seq", applied, "took", time.Since(start).Round(time.Millisecond))
	return bus.Run(ctx, s.js, s.pub, "ledger", s.log, bus.Handler{
		Name:       "ledger",
		Topic:      events.JobSubjects + " " + events.NodeSubjects,
		Subscriber: bus.SubscriberConfig{Durable: "ledger", Lanes: 1, MaxAckPending: 4096},
		Handle:     func(_ context.Context, env events.Envelope) error { return s.apply(env) },
	})
}

// apply folds an event in and wakes queries waiting for it.
func (s *Service) apply(env events.Envelope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if env.Seq <= s.proj.Applied() {
		return nil
	}
	s.proj.Apply(env)
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// waitFor blocks until the projection has applied seq, or d passes.
func (s *Service) waitFor(seq uint64, d time.Duration) uint64 {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		applied, ch := s.proj.Applied(), s.changed
		s.mu.Unlock()
		if applied >= seq {
			return applied
		}
		select {
		case <-ch:
		case <-deadline.C:
			return applied
		}
	}
}

func waitOf(d time.Duration) time.Duration {
	if d <= 0 {
		return 5 * time.Second
	}
	return min(d, 30*time.Second)
}

func (s *Service) serveRecord(req micro.Request) {
	var q api.RecordRequest
	if err := json.Unmarshal(req.Data(), &q); err != nil || q.Job == "" {
		_ = req.RespondJSON(api.RecordReply{Error: "expected {\"job\": ID}"})
		return
	}
	applied := s.waitFor(q.MinSeq, waitOf(q.Wait))
	s.mu.Lock()
	defer s.mu.Unlock()
	reply := api.RecordReply{Applied: applied}
	if applied < q.MinSeq {
		reply.Error = fmt.Sprintf("the ledger has read the log up to #%d, not yet #%d", applied, q.MinSeq)
	} else if r := s.proj.Record(q.Job); r != nil {
		reply.Record = r
	} else {
		reply.Error = "no such job: " + q.Job
	}
	s.respond(req, reply)
}

func (s *Service) serveList(req micro.Request) {
	var q api.ListRequest
	if len(req.Data()) > 0 {
		if err := json.Unmarshal(req.Data(), &q); err != nil {
			_ = req.RespondJSON(api.ListReply{Error: "bad list request: " + err.Error()})
			return
		}
	}
	applied := s.waitFor(q.MinSeq, waitOf(0))
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, more := s.proj.List(q)
	s.respond(req, api.ListReply{Records: recs, More: more, Applied: applied})
}

func (s *Service) serveInfo(req micro.Request) {
	var last uint64
	if st, err := s.js.Stream(context.Background(), events.Stream); err == nil {
		last = st.CachedInfo().State.LastSeq
	}
	s.mu.Lock()
	info := api.LedgerInfo{Applied: s.proj.Applied(), LastSeq: last, Records: len(s.proj.records), CaughtUp: s.caughtUp}
	s.mu.Unlock()
	if last > info.Applied {
		info.Behind = last - info.Applied
	}
	_ = req.RespondJSON(info)
}

// respond marshals while the lock is held (records change under it).
func (s *Service) respond(req micro.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		_ = req.Error("500", err.Error(), nil)
		return
	}
	_ = req.Respond(b)
}
