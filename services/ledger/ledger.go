package ledger

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

// Config configures the service.
type Config struct {
	// Source names this instance in its query service's metadata, e.g.
	// "e31/ledger/host-1". The ledger appends nothing to the log.
	Source string
	Logger *slog.Logger
	// Workers digest and decode messages in parallel; default GOMAXPROCS.
	Workers int
}

// Service is the LEDGER. Several may run; each keeps its own projection.
// Its query handlers may be called concurrently with the fold: every
// access to the projection holds mu.
type Service struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
	cfg Config

	mu       sync.Mutex
	proj     *Projection
	changed  chan struct{} // closed and replaced whenever proj moves on
	caughtUp bool
	ready    chan struct{} // closed once the log read at start is applied
}

// New returns a Service.
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Source == "" {
		cfg.Source = "e31/ledger"
	}
	return &Service{nc: nc, js: js, log: cfg.Logger.With("service", "ledger"), cfg: cfg,
		proj: NewProjection(), changed: make(chan struct{}), ready: make(chan struct{})}, nil
}

// CaughtUp is closed once the ledger has applied the whole log as it was
// when it started reading: the end of the rebuild.
func (s *Service) CaughtUp() <-chan struct{} { return s.ready }

// Run serves queries at once, rebuilds the records from the log, then
// follows it until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Setup(ctx, s.js, events.StreamOptions{}); err != nil {
		return err
	}
	svc, err := micro.AddService(s.nc, micro.Config{Name: "e31-ledger", Version: "0.2.0", Description: "hold records",
		Metadata: map[string]string{"source": s.cfg.Source}})
	if err != nil {
		return fmt.Errorf("ledger: query service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	for subject, h := range map[string]micro.HandlerFunc{
		api.LedgerRecord:      s.serveRecord,
		api.LedgerList:        s.serveList,
		api.LedgerInfoSubject: s.serveInfo,
		api.LedgerTotals:      s.serveTotals,
	} {
		name := subject[len("e31.api.ledger."):]
		if err := svc.AddEndpoint(name, h, micro.WithEndpointSubject(subject)); err != nil {
			return fmt.Errorf("ledger: endpoint %s: %w", subject, err)
		}
	}
	s.dropOldConsumer(ctx)
	if err := s.follow(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("ledger: follow the log: %w", err)
	}
	return nil
}

// dropOldConsumer deletes the durable consumer earlier versions followed
// the log with: nothing reads it any more, and left alone it would keep its
// state on the server for ever.
func (s *Service) dropOldConsumer(ctx context.Context) {
	name := bus.ConsumerName("ledger", events.JobSubjects+" "+events.NodeSubjects)
	if err := s.js.DeleteConsumer(ctx, events.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.log.Warn("could not delete the old durable consumer", "consumer", name, "err", err)
	}
}

// applyBatch folds prepared messages in and wakes queries waiting for them.
// It reports whether this batch ended the rebuild.
func (s *Service) applyBatch(xs []Prepared, last bool) bool {
	s.mu.Lock()
	gaps := s.proj.gaps
	for _, x := range xs {
		s.proj.ApplyPrepared(x)
	}
	if s.proj.gaps != gaps {
		s.log.Warn("the log has a gap: a message's sequence does not follow the one before", "seq", s.proj.Applied())
	}
	close(s.changed)
	s.changed = make(chan struct{})
	first := last && !s.caughtUp
	if first {
		s.caughtUp = true
	}
	s.mu.Unlock()
	if first {
		close(s.ready)
	}
	return first
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
		reply.Error = fmt.Sprintf("the ledger is catching up: it has read the log up to #%d, not yet #%d", applied, q.MinSeq)
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

func (s *Service) serveTotals(req micro.Request) {
	var q api.TotalsRequest
	if len(req.Data()) > 0 {
		if err := json.Unmarshal(req.Data(), &q); err != nil {
			_ = req.RespondJSON(api.TotalsReply{Error: "bad totals request: " + err.Error()})
			return
		}
	}
	applied := s.waitFor(q.MinSeq, waitOf(0))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.respond(req, api.TotalsReply{Submitters: s.proj.Totals(q), Applied: applied})
}

func (s *Service) serveInfo(req micro.Request) {
	var last uint64
	if st, err := s.js.Stream(context.Background(), events.Stream); err == nil {
		last = st.CachedInfo().State.LastSeq
	}
	_ = req.RespondJSON(s.info(last))
}

// info says how far the ledger has read, against the log's last sequence.
func (s *Service) info(last uint64) api.LedgerInfo {
	s.mu.Lock()
	info := api.LedgerInfo{Applied: s.proj.Applied(), LastSeq: last, Records: s.proj.Len(), CaughtUp: s.caughtUp, Head: s.proj.Head()}
	s.mu.Unlock()
	if last > info.Applied {
		info.Behind = last - info.Applied
	}
	return info
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
