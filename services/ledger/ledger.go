package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
)

// Config configures the service. It is the one way the service is built,
// by its own main, `e31 serve ledger` and `e31 dev` alike: the zero value is a
// working service, and New fills in the defaults of the fields left zero.
type Config struct {
	// Source names this instance in its query service's metadata, e.g.
	// "e31/ledger/host-1" (the default, events.DefaultSource). The ledger
	// appends nothing to the log.
	Source string
	Logger *slog.Logger
	// Workers digest and decode messages in parallel; default GOMAXPROCS.
	Workers int
	// Queries bounds what askers may hold of the query endpoints at once
	// (zero fields: query's defaults).
	Queries query.Limits
	// FlushEvery is how often the records changed since the last flush are
	// written to the ledger's bucket with a checkpoint, at the latest
	// (default 1 s): what a restart folds in again. A flush also comes
	// whenever a few hundred jobs have changed.
	FlushEvery time.Duration
	// Observer, if set, is told what the fold mended, for the operator's
	// metrics (pkg/metrics.Ledger implements it).
	Observer Observer
}

// Observer is told what the ledger's fold mended. Each says that the rule
// of the ledger's bucket (every entry is as of the checkpoint beside it)
// was broken, though the records stay right: an operator alerts on it
// rather than reading it in the log. Its methods are called with the
// projection held, and must not block.
type Observer interface {
	// MadeAgain: n entries of the bucket (0 or more, after each batch of
	// the fold) were found past the checkpoint beside them, and made again
	// from the log.
	MadeAgain(n int)
	// HeldAlready: n events were to be folded into a record that already
	// held them, and were skipped.
	HeldAlready(n int)
	// SetAside: n node's events were about an attempt another node held,
	// and were listed and set aside (events.FromHolder): a node that
	// speaks for what it does not hold is one to look at.
	SetAside(n int)
}

// nopObserver watches nothing.
type nopObserver struct{}

func (nopObserver) MadeAgain(int)   {}
func (nopObserver) HeldAlready(int) {}
func (nopObserver) SetAside(int)    {}

// Service is the LEDGER. Several may run; each keeps its own projection.
// Its query handlers run concurrently with each other and with the fold
// (pkg/query): every access to the projection holds mu.
type Service struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
	cfg Config

	queries *query.Server

	// tail reads the log into proj. Run makes it from the checkpoint, and
	// again from a newer one whenever another instance wrote one first
	// (errConflict); only Run's goroutines use it.
	tail       *bus.Tail
	caughtUp   chan struct{}
	caughtOnce sync.Once
	start      time.Time // of the catching up

	mu   sync.Mutex
	proj *Projection
	// changed is closed, and made again, whenever proj moves: a waiter
	// takes it with what proj has applied, under mu, so that a fold it
	// did not see wakes it. live says the projection has caught up with
	// the log once.
	changed chan struct{}
	live    bool
	// from is the checkpoint Run started from, and folded the messages it
	// has applied since: a restart folds in what the log holds after its
	// checkpoint, not the whole log.
	from, folded uint64
}

// New returns a Service.
func New(nc *nats.Conn, js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Source == "" {
		cfg.Source = events.DefaultSource("ledger")
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = time.Second
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	s := &Service{nc: nc, js: js, log: cfg.Logger.With("service", "ledger"), cfg: cfg,
		proj: NewProjection(), caughtUp: make(chan struct{}), changed: make(chan struct{})}
	s.queries = query.New(nc, query.Config{Name: "e31-ledger", Version: "0.4.0", Description: "hold records",
		Metadata: map[string]string{"source": cfg.Source}, Limits: cfg.Queries, Logger: s.log})
	// Every endpoint is served for every user, e31.api.*.ledger.<endpoint>:
	// the user is read from the subject each request came on.
	for endpoint, h := range map[string]query.Handler{
		wire.EndpointRecord: s.serveRecord,
		wire.EndpointList:   s.serveList,
		wire.EndpointTotals: s.serveTotals,
		wire.EndpointEvents: s.serveEvents,
		wire.EndpointHead:   s.serveHead,
	} {
		s.queries.Handle(endpoint, wire.LedgerSubject("*", endpoint), h)
	}
	return s, nil
}

// CaughtUp is closed once the ledger has applied the whole log as it was
// when it started reading: the end of its catching up.
func (s *Service) CaughtUp() <-chan struct{} { return s.caughtUp }

// Started says where Run started: the log's sequence its checkpoint was
// as of (0: none, the whole log is folded in), and how many messages it
// has applied since.
func (s *Service) Started() (from, folded uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.from, s.folded
}

// Run opens the records where the last checkpoint left them, serves
// queries, folds in the rest of the log, then follows it until ctx ends,
// writing what changed to the ledger's bucket as it goes and once more at
// the end. The queries being answered end with it.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Setup(ctx, s.js, events.StreamOptions{}); err != nil {
		return err
	}
	st, err := openStore(ctx, s.nc, s.js)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if err := s.open(ctx, st); err != nil {
		return err
	}
	if err := s.queries.Start(ctx); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer s.queries.Stop()
	s.dropOldConsumer(ctx)
	for {
		err = s.runFrom(ctx)
		if !isConflict(err) || ctx.Err() != nil {
			break
		}
		// Another instance wrote a checkpoint this one did not build on:
		// what it has in memory may disagree with the bucket, so it
		// starts again from the bucket's checkpoint.
		s.log.Info("another instance of the ledger wrote the bucket first: starting again from its checkpoint", "err", err)
		if err = s.open(ctx, st); err != nil {
			break
		}
	}
	if isConflict(err) {
		err = nil // ctx ended while starting again
	}
	// What changed since the last flush, so that the next start folds in
	// nothing it need not: with a context of its own, ctx is over.
	s.mu.Lock()
	st.ctx = context.Background()
	if ferr := s.proj.Flush(); ferr != nil && err == nil {
		s.log.Warn("could not write the last records before stopping: the next start folds them in again", "err", ferr)
	}
	s.mu.Unlock()
	return err
}

// open makes the projection from the bucket's checkpoint, and a tail to
// follow the log from there. A bucket written while it reads it is read
// again.
func (s *Service) open(ctx context.Context, st *store) error {
	for {
		proj, err := openProjection(st)
		if isConflict(err) && ctx.Err() == nil {
			// Written while read: read it again, after a pause, so that a
			// key written outside the ledger's batches, which would make
			// every reading fail, costs a warning a second, not a core.
			s.log.Warn("the ledger's bucket changed while it was read: reading it again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("ledger: start from the checkpoint: %w", err)
		}
		if err := s.logReaches(ctx, proj.Applied()); err != nil {
			return err
		}
		s.mu.Lock()
		s.proj, s.from, s.folded = proj, proj.Applied(), 0
		s.reportMended()
		s.moved()
		s.mu.Unlock()
		s.tail = s.newTail(proj.Applied() + 1)
		return nil
	}
}

// remadeAfter is how long the log must end before the ledger's checkpoint
// before the ledger takes it for made again. A server that is behind
// answers for the log's end during a partition or a change of leader (the
// cluster test: #2088 told for a log at #2189), and both instances
// stopped for good on that answer.
const remadeAfter = 2 * time.Minute

// logReaches returns once the log reaches applied, the checkpoint's last
// message, and an error that stops the ledger if it still ends before it
// after remadeAfter: the log was made again, and the bucket must be purged.
func (s *Service) logReaches(ctx context.Context, applied uint64) error {
	var since time.Time
	for {
		last, err := bus.LastSeq(ctx, s.js)
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if last >= applied {
			return nil
		}
		if since.IsZero() {
			since = time.Now()
			s.log.Warn("the log ends before the ledger's checkpoint, as a server tells it: asking again, in case that server is behind",
				"checkpoint", applied, "log_end", last, "for_at_most", remadeAfter)
		} else if time.Since(since) >= remadeAfter {
			return fmt.Errorf("ledger: its checkpoint is as of #%d, past the end of the log (#%d) for %s: the log was made again since; "+
				"purge the ledger's bucket (%s) for it to fold the new log in from its first message", applied, last, remadeAfter, events.LedgerBucket)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// runFrom follows the log with the tail open made, flushing as it goes,
// until ctx ends or the reading, the fold or a flush fails: errConflict
// if another instance wrote the bucket first.
func (s *Service) runFrom(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.follow(gctx); err != nil && gctx.Err() == nil {
			return fmt.Errorf("ledger: follow the log: %w", err)
		}
		return nil
	})
	g.Go(func() error { return s.flushEvery(gctx) })
	return g.Wait()
}

// moved wakes the waiters: proj has moved. mu is held.
func (s *Service) moved() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// changedSince is what proj has applied, and a channel closed once it
// moves.
func (s *Service) changedSince() (uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proj.Applied(), s.changed
}

// flushEvery flushes what changed at least every FlushEvery, so that a
// restart folds in little, and the jobs that ended leave memory.
func (s *Service) flushEvery(ctx context.Context) error {
	t := time.NewTicker(s.cfg.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.mu.Lock()
		err := s.proj.Flush()
		s.mu.Unlock()
		if isConflict(err) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			// The next tick tries again with all of it; the fold goes on.
			s.log.Warn("could not write the records to the ledger's bucket", "err", err)
		}
	}
}

// Ready reports whether the ledger has rebuilt its records from the log
// and follows it: until then its answers would be behind.
func (s *Service) Ready(context.Context) error {
	select {
	case <-s.caughtUp:
		return nil
	default:
		return errors.New("ledger: rebuilding the hold records from the log")
	}
}

// QueryStats are the counts of the query endpoints: requests refused for
// their reply subject, answered busy, served.
func (s *Service) QueryStats() query.Stats { return s.queries.Stats() }

// dropOldConsumer deletes the durable consumer earlier versions followed
// the log with: nothing reads it any more, and left alone it would keep its
// state on the server for ever.
func (s *Service) dropOldConsumer(ctx context.Context) {
	name := bus.ConsumerName("ledger", events.JobSubjects+" "+events.NodeSubjects)
	if err := s.js.DeleteConsumer(ctx, events.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.log.Warn("could not delete the old durable consumer", "consumer", name, "err", err)
	}
}

// applyBatch folds prepared messages in, flushing whenever the changed
// jobs would no longer fit in one flush; the tail wakes the queries
// waiting for them once it returns. The jobs of the batch that are not in
// memory are read from the bucket first, together, without the lock.
func (s *Service) applyBatch(xs []Prepared) error {
	s.mu.Lock()
	missing := s.proj.missing(xs)
	st := s.proj.store
	s.mu.Unlock()
	var prefetched map[string]*entry
	if st != nil && len(missing) > 0 {
		var err error
		if prefetched, err = st.loadMany(missing, true, decodeEntry); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proj.prefetched = prefetched
	defer func() { s.proj.prefetched = nil }()
	defer s.moved()
	gaps := s.proj.gaps
	defer s.reportMended()
	for _, x := range xs {
		if err := s.proj.ApplyPrepared(x); err != nil {
			return err
		}
		s.folded++
		if s.proj.changed() >= flushAt {
			if err := s.proj.Flush(); err != nil {
				return err
			}
		}
	}
	if s.proj.gaps != gaps {
		s.log.Warn("the log has a gap: a message's sequence does not follow the one before", "seq", s.proj.Applied())
	}
	return nil
}

// reportMended warns of each record the fold found ahead of it and mended
// (see Projection.job and fold), and counts them for the Observer. mu is
// held.
func (s *Service) reportMended() {
	for _, job := range s.proj.madeAgain {
		s.log.Warn("the ledger's bucket held this job's entry past the checkpoint beside it, as if two flushes had been taken over one base: "+
			"made again from the log", "job", job)
	}
	for _, h := range s.proj.heldAlready {
		s.log.Error("an event was to be folded into a record that already holds it: skipped, not listed twice", "job", h.job, "seq", h.seq, "record_last_seq", h.last)
	}
	for _, a := range s.proj.setAside {
		s.log.Warn("setting aside an event from a node the attempt was not held on", "job", a.job,
			"event", events.Name(a.typ), "held_on", a.heldOn, "seq", a.seq)
	}
	s.cfg.Observer.MadeAgain(len(s.proj.madeAgain))
	s.cfg.Observer.HeldAlready(len(s.proj.heldAlready))
	s.cfg.Observer.SetAside(len(s.proj.setAside))
	s.proj.madeAgain, s.proj.heldAlready, s.proj.setAside = nil, nil, nil
}

// waitFor waits until the projection has applied seq, or until deadline,
// and returns what it has applied. The error is the layer's: a user
// holding every long poll it may.
func (s *Service) waitFor(r *query.Request, seq uint64, deadline time.Time) (uint64, error) {
	for {
		applied, ch := s.changedSince()
		if applied >= seq {
			return applied, nil
		}
		changed, err := r.Await(ch, deadline)
		if err != nil {
			return applied, err
		}
		if !changed {
			applied, _ := s.changedSince()
			return applied, nil
		}
	}
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
// everything logged so far, until deadline. It returns what is applied and
// the sequence that was waited for.
func (s *Service) catchUp(r *query.Request, minSeq uint64, fresh bool, deadline time.Time) (applied, want uint64, err error) {
	want = minSeq
	if fresh {
		last, err := s.lastSeq()
		if err != nil {
			return 0, 0, err
		}
		want = max(want, last)
	}
	applied, err = s.waitFor(r, want, deadline)
	return applied, want, err
}

// failed answers a request whose handling failed: busy if a limit was
// reached, else with the error in reply's Error.
func failed[T any](r *query.Request, err error, reply func(msg string) T) {
	// A conflict says another instance has written past this one's base:
	// this one starts again from there at its next flush, and the asker,
	// told it is busy, asks again (of whichever instance answers then).
	if errors.Is(err, query.ErrBusy) || isConflict(err) {
		r.Busy(err)
		return
	}
	r.Respond(reply(err.Error()))
}

// behindError says the ledger has not read the log as far as asked: with
// the sequences to those who may read the log, without them to a
// submitter, who is told nothing of the log beyond its own jobs.
func behindError(r *query.Request, applied, want uint64) string {
	if !r.SeesAll() {
		return "the ledger is catching up: it has not read the log as far as your request needs yet; try again"
	}
	return fmt.Sprintf("the ledger is catching up: it has read the log up to #%d, not yet #%d", applied, want)
}

// shown is the Applied a reply tells r's user: the sequence itself to the
// auditor and the operator; to a submitter at most the minSeq it asked
// for, so that Applied >= MinSeq still says the ledger had caught up, and
// nothing more of how far the log goes.
func shown(r *query.Request, applied, minSeq uint64) uint64 {
	if r.SeesAll() {
		return applied
	}
	return min(applied, minSeq)
}

// noSuchJob is the answer about a job the user may not see, exactly as
// about one that does not exist: a submitter learns nothing of others' jobs.
func noSuchJob(job string) string { return "no such job: " + job }

// mayRead reports whether user may be told about job (known, owner: as
// Projection.Lookup says).
func mayRead(user string, known bool, owner string) bool {
	if auth.SeesAll(user) {
		return known
	}
	return user != "" && owner == user
}

func (s *Service) serveRecord(r *query.Request) {
	var q wire.RecordRequest
	if err := json.Unmarshal(r.Data(), &q); err != nil || q.Job == "" {
		r.Respond(wire.RecordReply{Error: "expected {\"job\": ID}"})
		return
	}
	// A long poll answers once the job is over, or when its time is up;
	// catching up counts against the same time.
	deadline := r.Deadline(wire.WaitOf(q.Wait))
	applied, want, err := s.catchUp(r, q.MinSeq, q.Fresh, deadline)
	if err != nil {
		failed(r, err, func(msg string) wire.RecordReply { return wire.RecordReply{Error: msg} })
		return
	}
	if applied < want {
		r.Respond(wire.RecordReply{Applied: shown(r, applied, q.MinSeq), Error: behindError(r, applied, want)})
		return
	}
	for {
		_, ch := s.changedSince()
		s.mu.Lock()
		reply := wire.RecordReply{Applied: shown(r, s.proj.Applied(), q.MinSeq)}
		rec, owner, known, err := s.proj.Lookup(q.Job)
		switch {
		case err != nil:
			reply.Error = err.Error()
		case !mayRead(r.User, known, owner):
			reply.Error, reply.Code = noSuchJob(q.Job), wire.CodeNoSuchJob
		case rec == nil && !q.UntilOver:
			reply.Error = "job " + q.Job + " has no record yet: its request could not be read"
		case rec != nil && (rec.Over() || !q.UntilOver):
			reply.Record = rec
		default:
			// Not over yet (or its unreadable request not yet rejected).
			s.mu.Unlock()
			changed, err := r.Await(ch, deadline)
			if err != nil {
				r.Busy(err)
				return
			}
			if changed {
				continue
			}
			// Time is up: the record as it is, or none yet (the job's
			// unreadable request is not rejected yet); the client asks again.
			s.mu.Lock()
			reply.Applied, reply.Record = shown(r, s.proj.Applied(), q.MinSeq), s.proj.Record(q.Job)
		}
		// Encoded while the lock is held: records change under it.
		r.Respond(reply)
		s.mu.Unlock()
		return
	}
}

func (s *Service) serveList(r *query.Request) {
	var q wire.ListRequest
	if len(r.Data()) > 0 {
		if err := json.Unmarshal(r.Data(), &q); err != nil {
			r.Respond(wire.ListReply{Error: "bad list request: " + err.Error()})
			return
		}
	}
	if !r.SeesAll() {
		if q.Submitter != "" && q.Submitter != r.User {
			r.Respond(wire.ListReply{Error: "you may list your own records only (you are " + r.User + ")"})
			return
		}
		q.Submitter = r.User
	}
	applied, want, err := s.catchUp(r, q.MinSeq, q.Fresh, r.Deadline(wire.WaitOf(0)))
	if err != nil {
		failed(r, err, listError)
		return
	}
	if q.UntilOver {
		// Re-count at most four times a second: a count reads every record.
		deadline := r.Deadline(wire.WaitOf(q.Wait))
		for {
			_, ch := s.changedSince()
			s.mu.Lock()
			pending := s.proj.Pending(q)
			s.mu.Unlock()
			if pending == 0 {
				break
			}
			changed, err := r.Await(ch, deadline)
			if err != nil {
				r.Busy(err)
				return
			}
			if !changed {
				break
			}
			if _, err := r.Await(nil, time.Now().Add(250*time.Millisecond)); err != nil {
				r.Busy(err)
				return
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var (
		recs []*hold.HoldRecord
		raw  [][]byte
		more bool
	)
	if whole(q) {
		raw, more, err = s.proj.ListJSON(q)
	} else {
		recs, more, err = s.proj.List(q)
	}
	if err != nil {
		failed(r, err, listError)
		return
	}
	reply := wire.ListReply{Records: recs, More: more, Applied: s.proj.Applied()}
	if applied < want {
		reply.Applied, reply.CatchingUp = applied, true
	}
	reply.Applied = shown(r, reply.Applied, q.MinSeq)
	if len(raw) == 0 {
		r.Respond(reply)
		return
	}
	b, err := listReplyJSON(reply, raw)
	if err != nil {
		failed(r, err, listError)
		return
	}
	r.RespondJSON(b)
}

// listError is a listing's answer that it failed, saying why.
func listError(msg string) wire.ListReply { return wire.ListReply{Error: msg} }

// recordsFirst is how the JSON of a ListReply with no records begins:
// Records is its first field.
var recordsFirst = []byte(`{"records":[]`)

// listReplyJSON is the JSON of reply with records (each a record's JSON)
// as its Records: the bytes reply would encode to with those records
// decoded, put together without decoding them.
func listReplyJSON(reply wire.ListReply, records [][]byte) ([]byte, error) {
	reply.Records = []*hold.HoldRecord{}
	head, err := gojson.Marshal(reply)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(head, recordsFirst) {
		return nil, fmt.Errorf("a listing's answer begins %.20q, not with its records", head)
	}
	n := len(head) + len(records)
	for _, r := range records {
		n += len(r)
	}
	b := make([]byte, 0, n)
	b = append(b, recordsFirst[:len(recordsFirst)-1]...)
	for i, r := range records {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, r...)
	}
	return append(b, head[len(recordsFirst)-1:]...), nil
}

func (s *Service) serveTotals(r *query.Request) {
	var q wire.TotalsRequest
	if len(r.Data()) > 0 {
		if err := json.Unmarshal(r.Data(), &q); err != nil {
			r.Respond(wire.TotalsReply{Error: "bad totals request: " + err.Error()})
			return
		}
	}
	if !r.SeesAll() {
		if q.Submitter != "" && q.Submitter != r.User {
			r.Respond(wire.TotalsReply{Error: "you may see your own totals only (you are " + r.User + ")"})
			return
		}
		q.Submitter = r.User
	}
	applied, want, err := s.catchUp(r, q.MinSeq, q.Fresh, r.Deadline(wire.WaitOf(0)))
	if err != nil {
		failed(r, err, func(msg string) wire.TotalsReply { return wire.TotalsReply{Error: msg} })
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	totals, err := s.proj.Totals(q)
	if err != nil {
		r.Respond(wire.TotalsReply{Error: err.Error()})
		return
	}
	r.Respond(wire.TotalsReply{Submitters: totals, Applied: shown(r, applied, q.MinSeq), CatchingUp: applied < want})
}

// serveHead says how far the ledger has read, how many records it has and
// its chain head: figures about every tenant's jobs and the whole log, for
// the auditor and the operator only.
func (s *Service) serveHead(r *query.Request) {
	if !r.SeesAll() {
		r.Respond(wire.LedgerInfo{Error: "the ledger's head (how far it has read the log, its records, its hash chain) is told to the auditor and the operator only",
			Code: wire.CodeNotPermitted})
		return
	}
	last, err := s.lastSeq()
	if err != nil {
		r.Respond(wire.LedgerInfo{Error: err.Error()})
		return
	}
	r.Respond(s.info(last))
}

// maxEventsReply bounds the events of one reply, so that it fits in one
// NATS message (1 MiB) whatever the encoding adds.
const maxEventsReply = 512 << 10

// serveEvents answers with a job's events as stored, read from the log
// after the ownership check: how a submitter sees its job's events without
// being allowed to read the log.
func (s *Service) serveEvents(r *query.Request) {
	var q wire.EventsRequest
	if err := json.Unmarshal(r.Data(), &q); err != nil || !events.ValidID(q.Job) {
		r.Respond(wire.EventsReply{Error: "expected {\"job\": ID}"})
		return
	}
	deadline := r.Deadline(wire.WaitOf(q.Wait))
	applied, want, err := s.catchUp(r, 0, q.Fresh, deadline)
	if err != nil {
		failed(r, err, func(msg string) wire.EventsReply { return wire.EventsReply{Error: msg} })
		return
	}
	if applied < want {
		r.Respond(wire.EventsReply{Applied: shown(r, applied, q.After), Error: behindError(r, applied, want)})
		return
	}
	// With Wait, hold the request until the job has an event after After:
	// also after its end, when deletions come.
	var over bool
	for {
		_, ch := s.changedSince()
		s.mu.Lock()
		rec, owner, known, err := s.proj.Lookup(q.Job)
		if err != nil {
			s.mu.Unlock()
			r.Respond(wire.EventsReply{Applied: shown(r, applied, q.After), Error: err.Error()})
			return
		}
		if !mayRead(r.User, known, owner) {
			s.mu.Unlock()
			r.Respond(wire.EventsReply{Applied: shown(r, applied, q.After), Error: noSuchJob(q.Job), Code: wire.CodeNoSuchJob})
			return
		}
		over = rec != nil && rec.Over()
		newer := rec == nil || len(rec.Events) == 0 || rec.Events[len(rec.Events)-1].Seq > q.After
		applied = s.proj.Applied()
		s.mu.Unlock()
		if q.Wait <= 0 || newer {
			break
		}
		changed, err := r.Await(ch, deadline)
		if err != nil {
			r.Busy(err)
			return
		}
		if !changed {
			break
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	evs, more, err := s.readJob(ctx, q.Job, q.After, applied)
	if err != nil {
		r.Respond(wire.EventsReply{Applied: shown(r, applied, q.After), Error: err.Error()})
		return
	}
	r.Respond(wire.EventsReply{Events: evs, More: more, Over: over && !more, Applied: shown(r, applied, q.After)})
}

// readJob reads a job's stored messages after sequence after, up to upTo,
// as many as fit in one reply. It reads with direct gets: a consumer per
// request, which any submitter can ask for as often as it likes, would
// fill the stream's consumer limit.
func (s *Service) readJob(ctx context.Context, job string, after, upTo uint64) ([]wire.StoredEvent, bool, error) {
	out := []wire.StoredEvent{}
	size := 0
	for m, err := range bus.StoredJob(ctx, s.js, job, after+1) {
		if err != nil {
			return nil, false, fmt.Errorf("read the events of %s: %w", job, err)
		}
		if m.Sequence > upTo {
			// Logged after the ownership check: the next request sees it.
			return out, true, nil
		}
		e := wire.NewStoredEvent(m.Sequence, m.Subject, m.Header, m.Data, m.Time)
		if len(out) > 0 && size+e.Size() > maxEventsReply {
			return out, true, nil
		}
		size += e.Size()
		out = append(out, e)
	}
	return out, false, nil
}

// info says how far the ledger has read, against the log's last sequence.
func (s *Service) info(last uint64) wire.LedgerInfo {
	s.mu.Lock()
	info := wire.LedgerInfo{Applied: s.proj.Applied(), LastSeq: last, Records: s.proj.Len(), CaughtUp: s.live, Head: s.proj.Head()}
	s.mu.Unlock()
	if last > info.Applied {
		info.Behind = last - info.Applied
	}
	return info
}
