package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/query/wire"
)

// Defaults of Limits: what one asker may hold of a query service at once.
const (
	// DefaultInFlight bounds the requests a service handles at once, for
	// all users together.
	DefaultInFlight = 1024
	// DefaultInFlightPerUser bounds the requests one user has handled at
	// once, long polls included.
	DefaultInFlightPerUser = 64
	// DefaultLongPollsPerUser bounds the requests of one user waiting at
	// once (`e31 wait`, `e31 events --follow`, and record requests waiting
	// for the ledger to catch up).
	DefaultLongPollsPerUser = 50
	// DefaultMaxWait bounds how long any request may wait: a long poll
	// answers by then, and the client asks again. It is the most the wire
	// allows (wire.MaxWait), which clients count on.
	DefaultMaxWait = wire.MaxWait
)

// WarnEvery is how often, at most, a Server logs the requests it refused
// to answer: a flood of them must not flood the log.
const WarnEvery = 10 * time.Second

// Limits bound what askers may hold of a Server at once. Zero fields take
// their defaults (DefaultInFlight, …); a MaxWait past wire.MaxWait is
// DefaultMaxWait, since clients give up by then.
type Limits struct {
	InFlight         int
	InFlightPerUser  int
	LongPollsPerUser int
	MaxWait          time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.InFlight <= 0 {
		l.InFlight = DefaultInFlight
	}
	if l.InFlightPerUser <= 0 {
		l.InFlightPerUser = DefaultInFlightPerUser
	}
	if l.LongPollsPerUser <= 0 {
		l.LongPollsPerUser = DefaultLongPollsPerUser
	}
	if l.MaxWait <= 0 || l.MaxWait > wire.MaxWait {
		l.MaxWait = DefaultMaxWait
	}
	return l
}

// Config configures a Server: the micro service it shows as (`nats micro
// ls`), its limits and its logger.
type Config struct {
	Name, Version, Description string
	Metadata                   map[string]string
	Limits                     Limits
	Logger                     *slog.Logger
}

// ErrBusy is wrapped by the error of a request beyond a limit: it was
// answered "busy", and asking again later may succeed.
var ErrBusy = errors.New("busy")

// Handler answers one request, with Request.Respond. Handlers run
// concurrently, each request in a goroutine of its own, and must be safe
// for that; a handler should return soon after the request's Context ends
// (the Server is stopping).
type Handler func(*Request)

// Stats are what a Server has done since it was made.
type Stats struct {
	// Refused counts requests that got no answer because their reply
	// subject was not under the asker's inbox prefix (or was missing).
	Refused uint64
	// Busy counts requests answered "busy": beyond a limit.
	Busy uint64
	// Served counts requests handed to their handler.
	Served uint64
	// InFlight and LongPolls are the requests being handled, and those of
	// them waiting, now.
	InFlight, LongPolls int
}

// Server serves query endpoints with micro (see the package doc). Its
// methods may be called concurrently.
type Server struct {
	nc     *nats.Conn
	cfg    Config
	limits Limits
	log    *slog.Logger

	endpoints []endpoint

	refused, busy, served atomic.Uint64
	// warned is when refusals were last logged (unix nanoseconds), and
	// unlogged how many were refused since.
	warned, unlogged atomic.Int64

	mu       sync.Mutex
	closed   bool
	inFlight int
	polls    int
	users    map[string]*load
	ctx      context.Context
	cancel   context.CancelFunc
	svc      micro.Service
	wg       sync.WaitGroup
}

// load is what one user holds now.
type load struct{ inFlight, polls int }

type endpoint struct {
	name, subject string
	h             Handler
}

// New returns a Server that will answer on nc once started.
func New(nc *nats.Conn, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{nc: nc, cfg: cfg, limits: cfg.Limits.withDefaults(), log: cfg.Logger, users: map[string]*load{}}
}

// Handle serves the endpoint name on subject (a wildcard in the user token,
// e.g. wire.LedgerSubject("*", wire.EndpointRecord)) with h. Call it before
// Start.
func (s *Server) Handle(name, subject string, h Handler) {
	s.endpoints = append(s.endpoints, endpoint{name, subject, h})
}

// Start serves every endpoint until Stop. Requests are handled in
// goroutines whose context ends with ctx or Stop.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.svc != nil || s.closed {
		return fmt.Errorf("query: %s: started twice", s.cfg.Name)
	}
	svc, err := micro.AddService(s.nc, micro.Config{Name: s.cfg.Name, Version: s.cfg.Version, Description: s.cfg.Description, Metadata: s.cfg.Metadata})
	if err != nil {
		return fmt.Errorf("query: %s: %w", s.cfg.Name, err)
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	for _, e := range s.endpoints {
		if err := svc.AddEndpoint(e.name, s.dispatch(e.h), micro.WithEndpointSubject(e.subject)); err != nil {
			_ = svc.Stop()
			s.cancel()
			return fmt.Errorf("query: %s: endpoint %s: %w", s.cfg.Name, e.subject, err)
		}
	}
	// Once Start returns, a request must find the endpoints: the server
	// has the subscriptions when it answers the flush's ping.
	if err := s.nc.Flush(); err != nil {
		_ = svc.Stop()
		s.cancel()
		return fmt.Errorf("query: %s: %w", s.cfg.Name, err)
	}
	s.svc = svc
	return nil
}

// Stop stops taking requests, ends the context of those being handled and
// waits until every handler has returned. Calling it twice is harmless.
func (s *Server) Stop() {
	s.mu.Lock()
	s.closed = true
	svc, cancel := s.svc, s.cancel
	s.mu.Unlock()
	if svc != nil {
		if err := svc.Stop(); err != nil {
			s.log.Warn("query service did not stop cleanly", "err", err)
		}
	}
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// Stats are the counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Refused: s.refused.Load(), Busy: s.busy.Load(), Served: s.served.Load(), InFlight: s.inFlight, LongPolls: s.polls}
}

// Limits are the limits in force.
func (s *Server) Limits() Limits { return s.limits }

// dispatch checks a request and hands it to h in a goroutine of its own.
// It runs in micro's goroutine for the endpoint, one request at a time, so
// it does nothing that waits.
func (s *Server) dispatch(h Handler) micro.HandlerFunc {
	return func(m micro.Request) {
		user := wire.UserOf(m.Subject())
		if !ReplyAllowed(user, m.Reply()) {
			s.refuse(user, m.Subject(), m.Reply())
			return
		}
		r := &Request{srv: s, msg: m, User: user, start: time.Now()}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		if err := s.admitLocked(user); err != nil {
			s.mu.Unlock()
			r.Busy(err)
			return
		}
		r.ctx = s.ctx
		s.wg.Add(1)
		s.mu.Unlock()
		s.served.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.done(r)
			h(r)
		}()
	}
}

// refuse counts a request whose reply subject is not the asker's, and logs
// it unless it logged one less than WarnEvery ago.
func (s *Server) refuse(user, subject, reply string) {
	s.refused.Add(1)
	n := s.unlogged.Add(1)
	now := time.Now().UnixNano()
	last := s.warned.Load()
	if now-last < int64(WarnEvery) || !s.warned.CompareAndSwap(last, now) {
		return
	}
	s.unlogged.Add(-n)
	s.log.Warn("refused to answer a request: its reply subject is not under the asker's inbox prefix",
		"service", s.cfg.Name, "user", user, "subject", subject, "reply", reply, "refused", n, "refused_total", s.refused.Load())
}

// admitLocked takes an in-flight slot for user, or says which limit is
// reached. Call with mu held.
func (s *Server) admitLocked(user string) error {
	u := s.users[user]
	if u == nil {
		u = &load{}
		s.users[user] = u
	}
	switch {
	case s.inFlight >= s.limits.InFlight:
		return fmt.Errorf("%w: %s is answering %d requests, its most at once", ErrBusy, s.cfg.Name, s.limits.InFlight)
	case u.inFlight >= s.limits.InFlightPerUser:
		return fmt.Errorf("%w: %s has %d requests in flight, the most one user may", ErrBusy, user, s.limits.InFlightPerUser)
	}
	s.inFlight++
	u.inFlight++
	return nil
}

// hold makes r a long poll, if user may hold another.
func (s *Server) hold(r *Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[r.User]
	if u.polls >= s.limits.LongPollsPerUser {
		return fmt.Errorf("%w: %s holds %d long polls open, the most one user may", ErrBusy, r.User, s.limits.LongPollsPerUser)
	}
	u.polls++
	s.polls++
	r.polling = true
	return nil
}

// done gives back what r held.
func (s *Server) done(r *Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[r.User]
	u.inFlight--
	s.inFlight--
	if r.polling {
		u.polls--
		s.polls--
	}
	if u.inFlight == 0 {
		delete(s.users, r.User)
	}
}

// Request is one request admitted to its handler: asked by User, and
// answered only on the asker's inbox. A Request is used by its handler's
// goroutine alone.
type Request struct {
	// User is who asks: the user token of the subject (wire.UserOf).
	User string

	srv     *Server
	msg     micro.Request
	ctx     context.Context
	start   time.Time
	polling bool
}

// Context ends when the Server stops.
func (r *Request) Context() context.Context { return r.ctx }

// Data is the request's body.
func (r *Request) Data() []byte { return r.msg.Data() }

// SeesAll reports whether User is answered about every job (auth.SeesAll).
func (r *Request) SeesAll() bool { return auth.SeesAll(r.User) }

// Respond answers with v as JSON. goccy/go-json writes what encoding/json
// does at about twice the speed: a page of the ledger's records is up to a
// MiB, and `e31 audit` asks for every one.
func (r *Request) Respond(v any) {
	b, err := gojson.Marshal(v)
	if err != nil {
		r.srv.log.Error("query: cannot encode a reply", "service", r.srv.cfg.Name, "subject", r.msg.Subject(), "err", err)
		b, _ = json.Marshal(reply{Error: "the service could not encode its answer"})
	}
	r.RespondJSON(b)
}

// RespondJSON answers with b, the JSON of a reply of pkg/query/wire the
// service put together itself: where encoding the reply would read again
// what it holds as JSON already (the ledger's listing of every record).
func (r *Request) RespondJSON(b []byte) {
	if err := r.msg.Respond(b); err != nil {
		r.srv.log.Debug("query: reply not sent", "service", r.srv.cfg.Name, "subject", r.msg.Subject(), "err", err)
	}
}

// reply is the part every reply type of pkg/query/wire shares.
type reply struct {
	Error string `json:"error"`
	Code  string `json:"code,omitempty"`
}

// Busy answers that a limit is reached, with err's text:
// {"error": "busy: …, retry", "code": "busy"}.
func (r *Request) Busy(err error) {
	r.srv.busy.Add(1)
	r.Respond(reply{Error: err.Error() + ", retry", Code: wire.CodeBusy})
}

// Deadline is when a request that may wait for wait must answer: at most
// the Server's MaxWait after it came.
func (r *Request) Deadline(wait time.Duration) time.Time {
	return r.start.Add(min(max(wait, 0), r.srv.limits.MaxWait))
}

// Await waits until ch is closed (true), or until deadline (capped at
// Deadline of MaxWait) or the Server stops (false). The first time it
// would wait, the request becomes one of its user's long polls until it
// is answered; if the user holds as many as it may, Await returns an error
// wrapping ErrBusy at once, for the handler to answer with Busy. A nil ch
// just waits for the deadline.
func (r *Request) Await(ch <-chan struct{}, deadline time.Time) (bool, error) {
	if most := r.Deadline(r.srv.limits.MaxWait); deadline.After(most) {
		deadline = most
	}
	left := time.Until(deadline)
	if left <= 0 {
		return false, nil
	}
	select {
	case <-ch:
		return true, nil
	default:
	}
	if !r.polling {
		if err := r.srv.hold(r); err != nil {
			return false, err
		}
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-ch:
		return true, nil
	case <-t.C:
		return false, nil
	case <-r.ctx.Done():
		return false, nil
	}
}
