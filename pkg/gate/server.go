package gate

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// Config configures a Server.
type Config struct {
	// Stores gives each submitter's store: where the attempts' data is.
	Stores stage.Stores
	Logger *slog.Logger
	// Workers is how many requests are answered at once; default 32.
	Workers int
	// Idle is how long a put session waits for its next piece before it
	// gives up, storing nothing; default a minute.
	Idle time.Duration
}

// Server is the gate. Any number may run: they share the requests, and
// each keeps the put sessions it opened.
type Server struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	stores  stage.Stores
	log     *slog.Logger
	workers int
	idle    time.Duration
	holds   holds
	ready   chan struct{}
}

// Ready is closed once Run listens: a request made before may find no
// gate to answer it (nats.ErrNoResponders, which passes).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// New returns a gate that answers on js's connection.
func New(js jetstream.JetStream, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.Idle <= 0 {
		cfg.Idle = time.Minute
	}
	return &Server{nc: js.Conn(), js: js, stores: cfg.Stores, log: cfg.Logger.With("part", "gate"),
		workers: cfg.Workers, idle: cfg.Idle, holds: holds{m: map[holdKey]*hold{}}, ready: make(chan struct{})}
}

// queue is the queue group the gate's instances share.
const queue = "e31-gate"

// Run answers the nodes until ctx ends; then it stops taking requests and
// waits for those it took, and the sessions it opened, to end.
func (s *Server) Run(ctx context.Context) error {
	in := make(chan *nats.Msg)
	var subs []*nats.Subscription
	defer func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}()
	// A callback that waits for a worker, not a channel the client fills:
	// requests wait in the subscription's own list, where a full channel
	// would drop them (a node staging a folder of many files asks for
	// each at once).
	take := func(m *nats.Msg) {
		select {
		case in <- m:
		case <-ctx.Done():
		}
	}
	for _, op := range Ops {
		sub, err := s.nc.QueueSubscribe(events.GateSubject("*", op), queue, take)
		if err != nil {
			return fmt.Errorf("gate: subscribe: %w", err)
		}
		subs = append(subs, sub)
	}
	// What is published about a job as it is stored (a stop, a loss, a
	// release) makes the gate look at the log at its next request of it:
	// a hold ends for the gate when it ends in the log, not a recheck
	// later.
	news, err := s.nc.Subscribe(events.JobSubjects, func(m *nats.Msg) {
		if job := events.JobOf(m.Subject); job != "" {
			s.holds.stale(job)
		}
	})
	if err != nil {
		return fmt.Errorf("gate: subscribe: %w", err)
	}
	if err := news.SetPendingLimits(-1, -1); err != nil {
		return fmt.Errorf("gate: subscribe: %w", err)
	}
	subs = append(subs, news)
	if err := s.nc.Flush(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("gate: subscribe: %w", err)
	}
	close(s.ready)
	g, gctx := errgroup.WithContext(ctx)
	for range s.workers {
		g.Go(func() error {
			for {
				select {
				case <-gctx.Done():
					return nil
				case m := <-in:
					s.handle(gctx, g, m)
				}
			}
		})
	}
	return g.Wait()
}

// handle answers one request; a put of more than a piece opens a session
// that g runs.
func (s *Server) handle(ctx context.Context, g *errgroup.Group, m *nats.Msg) {
	subj, err := events.ParseSubject(m.Subject)
	if err != nil || subj.Space != events.SpaceGate || m.Reply == "" {
		return
	}
	node := subj.Node
	if subj.Kind == OpConsumer {
		s.reply(m, nil, s.consumer(ctx, node, m.Data))
		return
	}
	q, err := requestOf(m.Header)
	if err != nil {
		s.reply(m, nil, err)
		return
	}
	log := s.log.With("node", node, "job", q.Job, "attempt", q.Attempt, "object", q.Name)
	h, err := s.held(ctx, node, q.Job, q.Attempt)
	if err == nil {
		switch subj.Kind {
		case OpStat:
			var info Info
			info, err = s.stat(ctx, h, q.Name)
			if err == nil {
				s.reply(m, info, nil)
				return
			}
		case OpGet:
			err = s.get(ctx, h, m, q.Name)
		case OpPut:
			err = s.put(ctx, g, node, h, m, q)
		}
	}
	if errors.Is(err, ErrRefused) {
		log.Warn("refused a node's request", "op", subj.Kind, "why", err)
	}
	if err != nil {
		s.reply(m, nil, err)
	}
}

// reply answers m with v as JSON, or with err.
func (s *Server) reply(m *nats.Msg, v any, err error) {
	r := nats.NewMsg(m.Reply)
	if err != nil {
		r.Header.Set(HeaderError, codeOf(err))
		r.Data = []byte(err.Error())
	} else if v != nil {
		b, merr := json.Marshal(v)
		if merr != nil {
			r.Header.Set(HeaderError, CodeFailed)
			b = []byte(merr.Error())
		}
		r.Data = b
	}
	if err := m.RespondMsg(r); err != nil {
		s.log.Debug("answering a node", "err", err)
	}
}

// consumer makes one of the node's consumers, as it proposes it, if it is
// one the node may have.
func (s *Server) consumer(ctx context.Context, node string, body []byte) error {
	var asked jetstream.ConsumerConfig
	if err := json.Unmarshal(body, &asked); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	cc, err := consumerFor(node, events.Stream, asked)
	if err != nil {
		s.log.Warn("refused a node's consumer", "node", node, "consumer", asked.Durable, "why", err)
		return err
	}
	if _, err := s.js.CreateOrUpdateConsumer(ctx, events.Stream, cc); err != nil {
		return fmt.Errorf("make consumer %s: %w", cc.Durable, err)
	}
	return nil
}

// stat says what is stored under name, to an attempt that may read it or
// write it. Of an object the attempt may neither read nor write under its
// own name (its log), only a content-addressed one may be asked about, and
// it reads as missing: the node then stores it, and learns nothing of what
// the submitter keeps.
func (s *Server) stat(ctx context.Context, h *hold, name string) (Info, error) {
	st, err := s.storeOf(ctx, h)
	if err != nil {
		return Info{}, err
	}
	ok, err := s.readable(ctx, h, st, name)
	if err != nil {
		return Info{}, err
	}
	if !ok && !stage.IsLogOf(name, h.job, h.attempt) {
		if _, blob := stage.BlobDigest(name); blob {
			return Info{}, fmt.Errorf("%s: %w", name, stage.ErrNotFound)
		}
		if _, parts := stage.PartsDigest(name); parts {
			return Info{}, fmt.Errorf("%s: %w", name, stage.ErrNotFound)
		}
		return Info{}, fmt.Errorf("%w: %s is no object job %s attempt %d may read", ErrRefused, name, h.job, h.attempt)
	}
	info, err := st.Stat(ctx, name)
	if err != nil {
		return Info{}, err
	}
	return Info{Size: info.Size, Digest: info.Digest}, nil
}

// get streams name to an attempt that may read it: its data, or its own
// log.
func (s *Server) get(ctx context.Context, h *hold, m *nats.Msg, name string) error {
	st, err := s.storeOf(ctx, h)
	if err != nil {
		return err
	}
	ok, err := s.readable(ctx, h, st, name)
	if err != nil {
		return err
	}
	if !ok && !stage.IsLogOf(name, h.job, h.attempt) {
		return fmt.Errorf("%w: %s is no object job %s attempt %d may read", ErrRefused, name, h.job, h.attempt)
	}
	rc, err := st.Get(ctx, name)
	if err != nil {
		return err
	}
	defer rc.Close()
	buf := make([]byte, ChunkBytes)
	part := 0
	for {
		n, rerr := io.ReadFull(rc, buf)
		if n > 0 {
			r := nats.NewMsg(m.Reply)
			r.Header.Set(HeaderPart, strconv.Itoa(part))
			r.Data = buf[:n]
			if err := s.nc.PublishMsg(r); err != nil {
				return err
			}
			part++
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			// The pieces sent are followed by the error: the node drops
			// them.
			return rerr
		}
	}
	r := nats.NewMsg(m.Reply)
	r.Header.Set(HeaderEnd, strconv.Itoa(part))
	return s.nc.PublishMsg(r)
}

// put stores an object the attempt may write: a blob only with the bytes
// its name is the digest of, a part list only if its parts join to the
// file it names (checked once it has come whole), and any object of the
// attempt's own log. The request carries the first piece: if it is the
// whole, it is stored and the answer says how that went; otherwise a
// session, which g runs, takes the rest.
func (s *Server) put(ctx context.Context, g *errgroup.Group, node string, h *hold, m *nats.Msg, q Request) error {
	parts := false
	switch {
	case stage.IsLogOf(q.Name, h.job, h.attempt):
	default:
		if d, ok := stage.BlobDigest(q.Name); ok && d == q.Digest {
			break
		}
		if _, ok := stage.PartsDigest(q.Name); ok {
			if q.Size > stage.MaxManifestBytes {
				return fmt.Errorf("%w: a part list of %d bytes", errBadRequest, q.Size)
			}
			parts = true
			break
		}
		return fmt.Errorf("%w: job %s attempt %d may not store %s (digest %s)", ErrRefused, h.job, h.attempt, q.Name, q.Digest)
	}
	if m.Header.Get(HeaderPart) != "0" {
		return fmt.Errorf("%w: a put begins with piece 0", errBadRequest)
	}
	st, err := s.storeOf(ctx, h)
	if err != nil {
		return err
	}
	if m.Header.Get(HeaderEnd) != "" {
		s.reply(m, nil, s.store(ctx, st, q, parts, m.Data))
		return nil
	}
	ses := strings.ToLower(nuid.Next())
	in := make(chan *nats.Msg, 4)
	sub, err := s.nc.ChanSubscribe(events.GateChunkSubject(node, ses), in)
	if err != nil {
		return err
	}
	first := m.Data
	g.Go(func() error {
		defer func() { _ = sub.Unsubscribe() }()
		s.session(ctx, st, q, parts, first, in)
		return nil
	})
	s.reply(m, Session{ID: ses}, nil)
	return nil
}

// store stores an object that came whole.
func (s *Server) store(ctx context.Context, st stage.Store, q Request, parts bool, b []byte) error {
	if parts {
		d, _ := stage.PartsDigest(q.Name)
		if err := stage.CheckPartList(ctx, st, d, b); err != nil {
			return err
		}
	}
	return st.Put(ctx, q.Name, q.Digest, q.Size, bytes.NewReader(b))
}

// session takes the pieces of one object after the first and stores it,
// answering each piece once written, the last with the outcome. An object
// stored intact already is taken and dropped: its bytes are the same.
func (s *Server) session(ctx context.Context, st stage.Store, q Request, parts bool, first []byte, in <-chan *nats.Msg) {
	log := s.log.With("job", q.Job, "attempt", q.Attempt, "object", q.Name)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	stored := make(chan error, 1)
	go func() {
		switch info, err := st.Stat(sctx, q.Name); {
		case err == nil && info.Digest == q.Digest && info.Size == q.Size && !parts:
			_, err = io.Copy(io.Discard, pr)
			stored <- err
		case parts:
			// A part list is small: it is checked whole before it is stored.
			var list bytes.Buffer
			_, err := io.Copy(&list, io.LimitReader(pr, stage.MaxManifestBytes+1))
			if err == nil {
				err = s.store(sctx, st, q, true, list.Bytes())
			}
			pr.CloseWithError(err)
			stored <- err
		default:
			err := st.Put(sctx, q.Name, q.Digest, q.Size, pr)
			pr.CloseWithError(err)
			stored <- err
		}
	}()
	fail := func(err error) {
		pw.CloseWithError(err)
		<-stored //nolint:errcheck // the store fails with the error the pipe was closed with
	}
	if _, err := pw.Write(first); err != nil {
		// The store stopped reading: its error says why.
		log.Warn("storing a node's upload failed: nothing stored", "err", cmp.Or(<-stored, err))
		return
	}
	idle := time.NewTimer(s.idle)
	defer idle.Stop()
	for part := 1; ; part++ {
		var m *nats.Msg
		select {
		case m = <-in:
		case <-idle.C:
			log.Warn("a node's upload stopped coming: nothing stored", "after", s.idle)
			fail(fmt.Errorf("gate: no piece for %s", s.idle))
			return
		case <-ctx.Done():
			fail(ctx.Err())
			return
		}
		idle.Reset(s.idle)
		if code := m.Header.Get(HeaderError); code != "" {
			fail(fmt.Errorf("gate: the node gave up: %s", m.Data))
			return
		}
		if got := m.Header.Get(HeaderPart); got != strconv.Itoa(part) {
			err := fmt.Errorf("%w: piece %q where %d was due", errBadRequest, got, part)
			fail(err)
			s.reply(m, nil, err)
			return
		}
		if _, err := pw.Write(m.Data); err != nil {
			// The store stopped reading: its error says why.
			s.reply(m, nil, cmp.Or(<-stored, err))
			return
		}
		if end := m.Header.Get(HeaderEnd); end != "" {
			pw.Close()
			s.reply(m, nil, <-stored)
			return
		}
		s.reply(m, nil, nil)
	}
}
