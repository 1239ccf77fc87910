package web

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// Config says what the page reads and whom it shows what.
type Config struct {
	// JS reads the log and asks the query endpoints. Its connection must be
	// the operator's (or, for a page that shows no pool leases, the
	// auditor's): the page reads every job and shows each viewer its part.
	JS jetstream.JetStream
	// Token is the operator's bearer token (the one /metrics asks for
	// beyond loopback: --http-token-file). When it is set, or Viewers is
	// not empty, every viewer must log in.
	Token string
	// Viewers maps a token to who shows it: a submitter's name, or
	// "operator" or "auditor", who see every job.
	Viewers map[string]string
	// TraceURL, when set, makes a job's trace id a link: the URL of a
	// tracing UI (Jaeger, Tempo, …) with "{trace}" where the trace id goes,
	// e.g. http://localhost:16686/trace/{trace}.
	TraceURL string
	// AskAs is the user the page asks the query endpoints as: "operator"
	// (the default) or "auditor", whichever JS's connection is.
	AskAs string
	// Logger reports what the page could not do.
	Logger *slog.Logger
	// Now is the clock of the charts and of "… ago"; time.Now if nil.
	Now func() time.Time
}

// Page is the operator's page: a projection of the log kept by Run, and the
// HTTP handler that renders it (Handler). Its methods may be called
// concurrently.
type Page struct {
	cfg Config
	js  jetstream.JetStream
	log *slog.Logger
	now func() time.Time

	// readMu makes one reader of the log at a time: Run, or a request
	// that must see what was logged an instant ago (readNew).
	readMu   sync.Mutex
	mu       sync.Mutex
	v        *view
	caughtUp bool
	err      error
	// changed is closed and replaced whenever the view moves, and version
	// counts how often it was: a live connection knows which version its
	// browser last fetched, and waits on changed only while that is the
	// newest, so that no change slips between two waits.
	changed chan struct{}
	version uint64

	views map[string]*template.Template
	// stopped is closed when Run returns: live connections end with it,
	// so that the server's shutdown need not wait for them.
	stopped  chan struct{}
	stopOnce sync.Once
	ctx      context.Context

	auditMu sync.Mutex
	audit   *auditResult
	auditOn bool
}

// auditResult is the last audit the page ran.
type auditResult struct {
	At       time.Time
	Took     time.Duration
	By       string
	Report   *audit.Report
	Err      string
	Compared bool
}

// ErrNoLog is returned by New without a JetStream to read the log from.
var ErrNoLog = errors.New("web: no JetStream to read the log")

// New returns a page of the log cfg.JS reads; Run follows it.
func New(cfg Config) (*Page, error) {
	if cfg.JS == nil {
		return nil, ErrNoLog
	}
	for tok, who := range cfg.Viewers {
		if tok == "" || who == "" {
			return nil, fmt.Errorf("web: a viewer needs a token and a name")
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	views, err := parseViews()
	if err != nil {
		return nil, err
	}
	return &Page{cfg: cfg, js: cfg.JS, log: log.With("component", "web"), now: now, v: newView(), changed: make(chan struct{}),
		views: views, stopped: make(chan struct{}), ctx: context.Background()}, nil
}

// retryAfter is how long Run waits before reading the log again after the
// reading failed, and how often it reads it without being woken.
const retryAfter = 2 * time.Second

// Run follows the log until ctx ends. It reads stored messages with direct
// gets (bus.Stored), as the audit does, not with a consumer, which a
// message a tenant forged as a status stalls; a core subscription to the
// log's subjects only wakes it when something new was logged. A failure to
// read is logged and retried; the page says meanwhile that it stands still.
func (p *Page) Run(ctx context.Context) error {
	p.mu.Lock()
	p.ctx = ctx
	p.mu.Unlock()
	defer p.stopOnce.Do(func() { close(p.stopped) })
	nc := p.js.Conn()
	wake := make(chan struct{}, 1)
	poke := func(*nats.Msg) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	for _, subj := range []string{events.JobSubjects, events.NodeSubjects} {
		sub, err := nc.Subscribe(subj, poke)
		if err != nil {
			return fmt.Errorf("web: follow %s: %w", subj, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	tick := time.NewTicker(retryAfter)
	defer tick.Stop()
	for {
		err := p.readNew(ctx)
		if ctx.Err() != nil {
			return nil
		}
		p.mu.Lock()
		if (err == nil) != (p.err == nil) && err != nil {
			p.log.Warn("reading the log failed; reading it again", "err", err, "after", retryAfter)
		}
		p.err = err
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

// readNew folds in what was stored after the last message folded in, up to
// the end of the log, and tells the live connections if anything moved.
// Readers take turns, so that no message is folded in twice.
func (p *Page) readNew(ctx context.Context) error {
	p.readMu.Lock()
	defer p.readMu.Unlock()
	p.mu.Lock()
	from := p.v.applied + 1
	p.mu.Unlock()
	moved := false
	defer func() {
		if moved {
			p.notify()
		}
	}()
	for m, err := range bus.Stored(ctx, p.js, "", from) {
		if err != nil {
			return fmt.Errorf("read the log from #%d: %w", from, err)
		}
		env, derr := events.Decode(m.Subject, m.Header, m.Data)
		p.mu.Lock()
		if derr != nil {
			p.v.skip(m.Sequence, events.IsUnknownType(derr))
		} else {
			env.Seq = m.Sequence
			p.v.apply(env, m.Header.Get("traceparent"))
		}
		p.mu.Unlock()
		moved = true
	}
	p.mu.Lock()
	if moved {
		p.v.sample()
	}
	if !p.caughtUp {
		p.caughtUp = true
		p.log.Info("page caught up with the log", "seq", p.v.applied)
		moved = true
	}
	p.mu.Unlock()
	return nil
}

// runCtx is Run's context: what outlives a request (the audit) ends with it.
func (p *Page) runCtx() context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ctx
}

// notify wakes every live connection.
func (p *Page) notify() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.version++
}

// watch returns the view's version and a channel closed at its next change.
func (p *Page) watch() (<-chan struct{}, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed, p.version
}

// Ready says nil once the page has read the log as far as it went when it
// started; otherwise why not.
func (p *Page) Ready(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("web: cannot read the log: %w", p.err)
	}
	if !p.caughtUp {
		return fmt.Errorf("web: reading the log, at #%d", p.v.applied)
	}
	return nil
}
