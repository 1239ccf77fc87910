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
	svc, err := micro.AddService(s.nc, micro.Config{Name: "e31-ledger", Version: "0.3.0", Description: "hold records",
		Metadata: map[string]string{"source": s.cfg.Source}})
	if err != nil {
		return fmt.Errorf("ledger: query service: %w", err)
	}
	defer func() { _ = svc.Stop() }()
	// Every endpoint is served for every user, e31.api.*.ledger.<endpoint>:
	// the user is read from the subject each request came on.
	for endpoint, h := range map[string]micro.HandlerFunc{
		api.EndpointRecord: s.serveRecord,
		api.EndpointList:   s.serveList,
		api.EndpointTotals: s.serveTotals,
		api.EndpointEvents: s.serveEvents,
		api.EndpointHead:   s.serveHead,
	} {
		subject := api.LedgerSubject("*", endpoint)
		if err := svc.AddEndpoint(endpoint, h, micro.WithEndpointSubject(subject)); err != nil {
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

// waitOf bounds how long a request may be held: a long poll ends at 30 s,
// and the client asks again.
func waitOf(d time.Duration) time.Duration {
	if d <= 0 {
		return 5 * time.Second
	}
	return min(d, 30*time.Second)
}

// lastSeq is the log's last sequence now.
func (s *Service) lastSeq() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, events.Stream)
	if err != nil {
		return 0, fmt.Errorf("the log's last sequence: %w", err)
	}
	return st.CachedInfo().State.LastSeq, nil
}

// catchUp waits until the projection has applied minSeq, or, with fresh,
// everything logged so far, for at most d. It returns what is applied and
// the sequence that was waited for.
func (s *Service) catchUp(minSeq uint64, fresh bool, d time.Duration) (applied, want uint64, err error) {
	want = minSeq
	if fresh {
		last, err := s.lastSeq()
		if err != nil {
			return 0, 0, err
		}
		want = max(want, last)
	}
	return s.waitFor(want, d), want, nil
}

// behindError says the ledger has not read the log as far as asked.
func behindError(applied, want uint64) string {
	return fmt.Sprintf("the ledger is catching up: it has read the log up to #%d, not yet #%d", applied, want)
}

// noSuchJob is the answer about a job the user may not see, exactly as
// about one that does not exist: a submitter learns nothing of others' jobs.
func noSuchJob(job string) string { return "no such job: " + job }

// mayRead reports whether user may be told about job. Call with mu held.
func (s *Service) mayRead(user, job string) bool {
	if api.SeesAll(user) {
		return s.proj.Known(job) || s.proj.Record(job) != nil
	}
	return user != "" && s.proj.Owner(job) == user
}

// changes waits for the projection to move on, or for the deadline.
func (s *Service) changes(ch <-chan struct{}, deadline time.Time) bool {
	left := time.Until(deadline)
	if left <= 0 {
		return false
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

func (s *Service) serveRecord(req micro.Request) {
	user := api.UserOf(req.Subject())
	var q api.RecordRequest
	if err := json.Unmarshal(req.Data(), &q); err != nil || q.Job == "" {
		_ = req.RespondJSON(api.RecordReply{Error: "expected {\"job\": ID}"})
		return
	}
	start := time.Now()
	applied, want, err := s.catchUp(q.MinSeq, q.Fresh, waitOf(q.Wait))
	if err != nil {
		_ = req.RespondJSON(api.RecordReply{Error: err.Error()})
		return
	}
	if applied < want {
		_ = req.RespondJSON(api.RecordReply{Applied: applied, Error: behindError(applied, want)})
		return
	}
	// A long poll answers once the job is over, or when its time is up.
	deadline := start.Add(waitOf(q.Wait))
	for {
		s.mu.Lock()
		reply := api.RecordReply{Applied: s.proj.Applied()}
		r := s.proj.Record(q.Job)
		switch {
		case !s.mayRead(user, q.Job):
			reply.Error, reply.Code = noSuchJob(q.Job), api.CodeNoSuchJob
		case r == nil && !q.UntilOver:
			reply.Error = "job " + q.Job + " has no record yet: its request could not be read"
		case r != nil && (r.Over() || !q.UntilOver):
			reply.Record = r
		default:
			// Not over yet (or its unreadable request not yet rejected).
			ch := s.changed
			s.mu.Unlock()
			if s.changes(ch, deadline) {
				continue
			}
			// Time is up: the record as it is, or none yet (the job's
			// unreadable request is not rejected yet); the client asks again.
			s.mu.Lock()
			reply.Applied, reply.Record = s.proj.Applied(), s.proj.Record(q.Job)
		}
		s.respond(req, reply)
		s.mu.Unlock()
		return
	}
}

func (s *Service) serveList(req micro.Request) {
	user := api.UserOf(req.Subject())
	var q api.ListRequest
	if len(req.Data()) > 0 {
		if err := json.Unmarshal(req.Data(), &q); err != nil {
			_ = req.RespondJSON(api.ListReply{Error: "bad list request: " + err.Error()})
			return
		}
	}
	if !api.SeesAll(user) {
		if q.Submitter != "" && q.Submitter != user {
			_ = req.RespondJSON(api.ListReply{Error: "you may list your own records only (you are " + user + ")"})
			return
		}
		q.Submitter = user
	}
	start := time.Now()
	applied, want, err := s.catchUp(q.MinSeq, q.Fresh, waitOf(0))
	if err != nil {
		_ = req.RespondJSON(api.ListReply{Error: err.Error()})
		return
	}
	if q.UntilOver {
		// Re-count at most four times a second: a count reads every record.
		deadline := start.Add(waitOf(q.Wait))
		for {
			s.mu.Lock()
			pending, ch := s.proj.Pending(q), s.changed
			s.mu.Unlock()
			if pending == 0 || !s.changes(ch, deadline) {
				break
			}
			next := time.Now().Add(250 * time.Millisecond)
			if next.After(deadline) {
				next = deadline
			}
			s.changes(nil, next)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, more := s.proj.List(q)
	reply := api.ListReply{Records: recs, More: more, Applied: s.proj.Applied()}
	if applied < want {
		reply.Applied = applied
	}
	s.respond(req, reply)
}

func (s *Service) serveTotals(req micro.Request) {
	user := api.UserOf(req.Subject())
	var q api.TotalsRequest
	if len(req.Data()) > 0 {
		if err := json.Unmarshal(req.Data(), &q); err != nil {
			_ = req.RespondJSON(api.TotalsReply{Error: "bad totals request: " + err.Error()})
			return
		}
	}
	if !api.SeesAll(user) {
		if q.Submitter != "" && q.Submitter != user {
			_ = req.RespondJSON(api.TotalsReply{Error: "you may see your own totals only (you are " + user + ")"})
			return
		}
		q.Submitter = user
	}
	applied, _, err := s.catchUp(q.MinSeq, q.Fresh, waitOf(0))
	if err != nil {
		_ = req.RespondJSON(api.TotalsReply{Error: err.Error()})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.respond(req, api.TotalsReply{Submitters: s.proj.Totals(q), Applied: applied})
}

func (s *Service) serveHead(req micro.Request) {
	last, err := s.lastSeq()
	if err != nil {
		_ = req.Error("503", err.Error(), nil)
		return
	}
	_ = req.RespondJSON(s.info(last))
}

// maxEventsReply bounds the events of one reply, so that it fits in one
// NATS message (1 MiB) whatever the encoding adds.
const maxEventsReply = 512 << 10

// serveEvents answers with a job's events as stored, read from the log
// after the ownership check: how a submitter sees its job's events without
// being allowed to read the log.
func (s *Service) serveEvents(req micro.Request) {
	user := api.UserOf(req.Subject())
	var q api.EventsRequest
	if err := json.Unmarshal(req.Data(), &q); err != nil || !events.ValidID(q.Job) {
		_ = req.RespondJSON(api.EventsReply{Error: "expected {\"job\": ID}"})
		return
	}
	start := time.Now()
	applied, want, err := s.catchUp(0, q.Fresh, waitOf(q.Wait))
	if err != nil {
		_ = req.RespondJSON(api.EventsReply{Error: err.Error()})
		return
	}
	if applied < want {
		_ = req.RespondJSON(api.EventsReply{Applied: applied, Error: behindError(applied, want)})
		return
	}
	// With Wait, hold the request until the job has an event after After:
	// also after its end, when deletions come.
	deadline := start.Add(waitOf(q.Wait))
	var over bool
	for {
		s.mu.Lock()
		if !s.mayRead(user, q.Job) {
			s.mu.Unlock()
			_ = req.RespondJSON(api.EventsReply{Applied: applied, Error: noSuchJob(q.Job), Code: api.CodeNoSuchJob})
			return
		}
		r := s.proj.Record(q.Job)
		over = r != nil && r.Over()
		newer := r == nil || len(r.Events) == 0 || r.Events[len(r.Events)-1].Seq > q.After
		applied = s.proj.Applied()
		ch := s.changed
		s.mu.Unlock()
		if q.Wait <= 0 || newer || !s.changes(ch, deadline) {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, more, err := s.readJob(ctx, q.Job, q.After, applied)
	if err != nil {
		_ = req.RespondJSON(api.EventsReply{Applied: applied, Error: err.Error()})
		return
	}
	_ = req.RespondJSON(api.EventsReply{Events: evs, More: more, Over: over && !more, Applied: applied})
}

// readJob reads a job's stored messages after sequence after, up to upTo,
// as many as fit in one reply. It reads with direct gets: a consumer per
// request, which any submitter can ask for as often as it likes, would
// fill the stream's consumer limit.
func (s *Service) readJob(ctx context.Context, job string, after, upTo uint64) ([]api.StoredEvent, bool, error) {
	out := []api.StoredEvent{}
	size := 0
	for m, err := range bus.Stored(ctx, s.js, events.JobSubject(job), after+1) {
		if err != nil {
			return nil, false, fmt.Errorf("read the events of %s: %w", job, err)
		}
		if m.Sequence > upTo {
			// Logged after the ownership check: the next request sees it.
			return out, true, nil
		}
		e := api.NewStoredEvent(m.Sequence, m.Subject, m.Header, m.Data)
		if len(out) > 0 && size+e.Size() > maxEventsReply {
			return out, true, nil
		}
		size += e.Size()
		out = append(out, e)
	}
	return out, false, nil
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
