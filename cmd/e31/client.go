package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
)

// client is a CLI command's connection to e31.
type client struct {
	a   *app
	nc  *nats.Conn
	js  jetstream.JetStream
	who who
	// refusals is told what the server refuses: a refused publish is
	// otherwise only an unanswered request.
	refusals *refusals
}

// refusals hands the server's permission errors to the operations waiting
// on the subjects they name.
type refusals struct {
	mu      sync.Mutex
	waiting map[*refusalWatch]struct{}
}

type refusalWatch struct {
	subjects []string
	cancel   context.CancelCauseFunc
}

// refused ends every operation waiting on the subject err names.
func (r *refusals) refused(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.waiting {
		for _, s := range w.subjects {
			if strings.Contains(err.Error(), `"`+s+`"`) {
				w.cancel(err)
				break
			}
		}
	}
}

// who is who the CLI acts as: what ends its requests' and cancels'
// subjects, and the user it asks the query services as.
type who struct {
	// Role is the role its credentials give; "" without e31 credentials.
	Role auth.Role
	// Name submits and cancels: e31.job.<id>.requested.<Name>.
	Name string
	// User asks: e31.api.<User>.….
	User string
	// Creds is the credentials file, if any.
	Creds string
}

// readsLog reports whether who may read the event log itself: the auditor
// and the operator, and anyone on a server without authentication.
func (w who) readsLog() bool { return w.Role != auth.Submitter && w.Role != auth.Service }

func (w who) String() string {
	if w.Role == "" {
		return w.Name + " (no e31 credentials)"
	}
	return string(w.Role) + " " + w.Name
}

// whoami reads who the CLI acts as from its credentials. Without e31
// credentials it submits as the OS user and asks as the operator: a server
// without authentication lets anyone do anything, and a server with it
// refuses such a client before it asks anything.
func (a *app) whoami(creds string) (who, error) {
	if creds == "" {
		return who{Name: a.env.User, User: events.Operator}, nil
	}
	c, err := auth.ReadCreds(creds)
	if err != nil {
		return who{}, usageErr("--creds: %v", err)
	}
	id, err := c.Identity()
	if errors.Is(err, auth.ErrNotE31) {
		return who{Name: a.env.User, User: a.env.User, Creds: creds}, nil
	}
	if err != nil {
		return who{}, usageErr("--creds %s: %v", creds, err)
	}
	return who{Role: id.Role, Name: id.Principal(), User: id.Principal(), Creds: creds}, nil
}

// dial connects, failing fast with advice when nothing answers.
func (a *app) dial(ctx context.Context) (*client, error) {
	cfg := a.clientConfig("e31-cli")
	w, err := a.whoami(cfg.Creds)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts, err := natsOptions(cfg)
	if err != nil {
		return nil, usageErr("--creds: %v", err)
	}
	if w.Role == "" {
		// No e31 credentials name an inbox: reply on the one of the user
		// the CLI asks as, the only one the query services answer on.
		opts = append(opts, nats.CustomInboxPrefix(query.InboxPrefix(w.User)))
	}
	r := &refusals{waiting: map[*refusalWatch]struct{}{}}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			r.refused(err)
		}
	}))
	nc, err := nats.Connect(orDefault(cfg.URL, connect.DefaultURL), opts...)
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		advice := "give credentials with --creds or E31_CREDS ('e31 dev' writes them into DIR/creds)"
		if cfg.Creds != "" {
			advice = "the credentials in " + cfg.Creds + " are not accepted: expired, revoked, or for another system"
		}
		return nil, troubleErr(fmt.Errorf("NATS at %s refused the connection: %v: %s", orDefault(cfg.URL, connect.DefaultURL), err, advice))
	}
	if err != nil {
		return nil, troubleErr(fmt.Errorf("cannot reach NATS at %s: %v (is 'e31 dev' running? set --nats or E31_NATS)", orDefault(cfg.URL, connect.DefaultURL), err))
	}
	js, err := connect.Ready(dctx, nc)
	if err != nil {
		nc.Close()
		return nil, troubleErr(fmt.Errorf("NATS at %s does not answer JetStream requests: %w", nc.ConnectedUrl(), err))
	}
	return &client{a: a, nc: nc, js: js, who: w, refusals: r}, nil
}

func natsOptions(cfg connect.Config) ([]nats.Option, error) {
	opts := []nats.Option{nats.Name(cfg.Name), nats.Timeout(5 * time.Second)}
	more, err := connect.SecurityOptions(cfg)
	if err != nil {
		return nil, err
	}
	return append(opts, more...), nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (c *client) close() { c.nc.Close() }

// errNoSuchJob is wrapped by the answer about a job that does not exist or
// is not the asker's.
var errNoSuchJob = errors.New("no such job")

// errNotPermitted is wrapped by errors the server's permissions caused.
var errNotPermitted = errors.New("not permitted")

// guard returns a context that ends as soon as the server refuses a
// publish on one of subjects: a refused publish then fails at once, not at
// its timeout, and says why.
func (c *client) guard(ctx context.Context, subjects ...string) (context.Context, context.CancelFunc) {
	gctx, cancel := context.WithCancelCause(ctx)
	w := &refusalWatch{subjects: subjects, cancel: cancel}
	c.refusals.mu.Lock()
	c.refusals.waiting[w] = struct{}{}
	c.refusals.mu.Unlock()
	return gctx, func() {
		c.refusals.mu.Lock()
		delete(c.refusals.waiting, w)
		c.refusals.mu.Unlock()
		cancel(nil)
	}
}

// refused turns an error that the server's permissions caused into a
// clear one; others are returned as they are.
func (c *client) refused(ctx context.Context, what string, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, nats.ErrPermissionViolation) {
		return &exitError{exitUsage, fmt.Errorf("%s: %w: the credentials of %s do not allow it (%v)", what, errNotPermitted, c.who, cause)}
	}
	return troubleErr(fmt.Errorf("%s: %w", what, err))
}

// needLog refuses early what only readers of the log may do.
func (c *client) needLog(what string) error {
	if c.who.readsLog() {
		return nil
	}
	return &exitError{exitUsage, fmt.Errorf("%s reads the event log itself: %w for %s; it needs the auditor's or the operator's credentials", what, errNotPermitted, c.who)}
}

// append records ev about job as the CLI's user.
func (c *client) append(ctx context.Context, job string, ev events.Event, opts ...bus.AppendOption) (events.Envelope, error) {
	subject, err := events.SubjectOf(job, ev)
	if err != nil {
		return events.Envelope{}, usageErr("%v", err)
	}
	gctx, done := c.guard(ctx, subject)
	defer done()
	env, err := bus.NewPublisher(c.js, "e31/cli", nil).Append(gctx, job, ev, opts...)
	if err != nil && !errors.Is(err, bus.ErrConflict) {
		return env, c.refused(gctx, fmt.Sprintf("%s of %s", events.Name(ev.Type()), job), err)
	}
	return env, err
}

// errBusy is wrapped by the error of a query that a service answered
// "busy" (wire.CodeBusy) until the query's deadline.
var errBusy = errors.New("the service stayed busy")

// request sends a query, as the CLI's user, to the endpoint subjectOf
// gives for it, and decodes the reply. A "busy" reply (the service is at a
// limit: see pkg/query) is asked again, with backoff, until timeout.
func (c *client) request(ctx context.Context, subject string, req, reply any, timeout time.Duration) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	gctx, done := c.guard(rctx, subject)
	defer done()
	var busy error
	m, err := backoff.Retry(gctx, func() (*nats.Msg, error) {
		m, err := c.nc.RequestWithContext(gctx, subject, b)
		if err != nil {
			return nil, backoff.Permanent(err)
		}
		var head struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.Unmarshal(m.Data, &head) == nil && head.Code == wire.CodeBusy {
			busy = fmt.Errorf("%w: %s", errBusy, head.Error)
			return nil, busy
		}
		return m, nil
	}, backoff.WithBackOff(busyBackoff()), backoff.WithMaxElapsedTime(0))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return troubleErr(fmt.Errorf("nothing answers %s: is the %s service running?", subject, serviceOf(subject)))
	case err != nil && busy != nil && !errors.Is(context.Cause(gctx), nats.ErrPermissionViolation) && ctx.Err() == nil:
		return troubleErr(fmt.Errorf("%s: %w (%s)", subject, busy, timeout))
	case err != nil:
		return c.refused(gctx, subject, err)
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		return troubleErr(fmt.Errorf("%s: bad reply: %w", subject, err))
	}
	return nil
}

// busyBackoff is how the CLI waits between asking a busy service again:
// soon at first, at most every 2 s, spread out so that many clients
// turned away together do not come back together.
func busyBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 2 * time.Second
	return b
}

// ledger is the subject of one of the ledger's endpoints for the CLI's user.
func (c *client) ledger(endpoint string) string { return wire.LedgerSubject(c.who.User, endpoint) }

func serviceOf(subject string) string {
	switch {
	case strings.HasSuffix(subject, ".rent."+wire.EndpointWhy):
		return "rent"
	case strings.HasSuffix(subject, ".output.stored"):
		return "output"
	}
	return "ledger"
}

// head asks the ledger how far the log goes: its last sequence now, read
// by the ledger, so that a client needs no access to the log to ask any
// service for an answer as of now. Only the auditor and the operator are
// told.
func (c *client) head(ctx context.Context) (wire.LedgerInfo, error) {
	var info wire.LedgerInfo
	if err := c.request(ctx, c.ledger(wire.EndpointHead), nil, &info, 10*time.Second); err != nil {
		return info, err
	}
	switch {
	case info.Code == wire.CodeNotPermitted:
		return info, &exitError{exitUsage, fmt.Errorf("%w for %s: %s", errNotPermitted, c.who, info.Error)}
	case info.Error != "":
		return info, troubleErr(fmt.Errorf("the ledger's head: %s", info.Error))
	}
	return info, nil
}

// lastSeq is the log's last sequence now, as the ledger reads it.
func (c *client) lastSeq(ctx context.Context) (uint64, error) {
	info, err := c.head(ctx)
	return info.LastSeq, err
}

// asOfNow is how to ask for an answer as of everything logged so far: for
// the auditor and the operator, the log's last sequence as MinSeq (which
// also tells how far behind an answer is); for a submitter, which is told
// nothing of the log beyond its own jobs, Fresh, and the service reads the
// last sequence itself.
func (c *client) asOfNow(ctx context.Context) (minSeq uint64, fresh bool, err error) {
	if !auth.SeesAll(c.who.User) {
		return 0, true, nil
	}
	seq, err := c.lastSeq(ctx)
	return seq, false, err
}

// record returns a job's hold record as of at least minSeq.
func (c *client) record(ctx context.Context, job string, minSeq uint64) (*hold.HoldRecord, error) {
	rec, _, err := c.recordAs(ctx, wire.RecordRequest{Job: job, MinSeq: minSeq, Wait: 10 * time.Second})
	return rec, err
}

// recordAs asks for a record and returns it with how far the ledger had
// read when it answered.
func (c *client) recordAs(ctx context.Context, q wire.RecordRequest) (*hold.HoldRecord, uint64, error) {
	var reply wire.RecordReply
	if err := c.request(ctx, c.ledger(wire.EndpointRecord), q, &reply, waitOf(q.Wait)+5*time.Second); err != nil {
		return nil, 0, err
	}
	if reply.Code == wire.CodeNoSuchJob {
		return nil, reply.Applied, fmt.Errorf("%w: %s", errNoSuchJob, q.Job)
	}
	if reply.Error != "" {
		return nil, reply.Applied, errors.New(reply.Error)
	}
	// A submitter is not told how far the ledger has read (see
	// wire.RecordReply); it has read its job's last event, at least.
	applied := reply.Applied
	if r := reply.Record; r != nil && len(r.Events) > 0 {
		applied = max(applied, r.Events[len(r.Events)-1].Seq)
	}
	return reply.Record, applied, nil
}

// waitOf is how long the ledger may hold a request.
func waitOf(d time.Duration) time.Duration {
	if d <= 0 {
		return 5 * time.Second
	}
	return min(d, 30*time.Second)
}

// currentRecord reads a job's record including everything logged so far.
func (c *client) currentRecord(ctx context.Context, job string) (*hold.HoldRecord, error) {
	rec, _, err := c.freshRecord(ctx, job)
	return rec, err
}

// freshRecord reads a job's record including everything logged so far, and
// how far the ledger had read then.
func (c *client) freshRecord(ctx context.Context, job string) (*hold.HoldRecord, uint64, error) {
	if !events.ValidID(job) {
		return nil, 0, usageErr("%q is not a job id", job)
	}
	return c.recordAs(ctx, wire.RecordRequest{Job: job, Fresh: true, Wait: 10 * time.Second})
}

// why asks the scheduler about a job, as of at least minSeq.
func (c *client) why(ctx context.Context, job string, minSeq uint64) (wire.WhyReply, error) {
	var reply wire.WhyReply
	if err := c.request(ctx, wire.RentWhySubject(c.who.User), wire.WhyRequest{Job: job, MinSeq: minSeq}, &reply, 8*time.Second); err != nil {
		return reply, err
	}
	if reply.Error != "" {
		return reply, errors.New(reply.Error)
	}
	return reply, nil
}

// jobEvents asks the ledger for a job's events from sequence after on, as
// stored. With wait, a request that finds nothing new waits that long for
// the job's next event. It is how anyone, a submitter included, reads one
// job's events: the ledger checks that the job is the asker's.
func (c *client) jobEvents(ctx context.Context, job string, after uint64, wait time.Duration, fresh bool) (wire.EventsReply, error) {
	var reply wire.EventsReply
	q := wire.EventsRequest{Job: job, After: after, Wait: wait, Fresh: fresh}
	if err := c.request(ctx, c.ledger(wire.EndpointEvents), q, &reply, waitOf(wait)+10*time.Second); err != nil {
		return reply, err
	}
	if reply.Code == wire.CodeNoSuchJob {
		return reply, fmt.Errorf("%w: %s", errNoSuchJob, job)
	}
	if reply.Error != "" {
		return reply, errors.New(reply.Error)
	}
	return reply, nil
}

// followJob calls fn with each of a job's events, from the first, until fn
// returns false or ctx ends; with untilOver, also once the job is over and
// its events are read.
func (c *client) followJob(ctx context.Context, job string, untilOver bool, fn func(wire.StoredEvent) bool) error {
	var after uint64
	fresh := true
	for {
		reply, err := c.jobEvents(ctx, job, after, 30*time.Second, fresh)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		fresh = false
		for _, e := range reply.Events {
			after = e.Seq
			if !fn(e) {
				return nil
			}
		}
		if untilOver && reply.Over && !reply.More {
			return nil
		}
	}
}

// store is the data store of submitter: the CLI's own user's for staging,
// a job's submitter's for its output.
func (c *client) store(ctx context.Context, submitter string) (stage.Store, error) {
	// A submitter may not make its bucket (a user who may create streams
	// could capture others' subjects): the operator does, or a service
	// when its first job needs it. Without credentials, or as the operator,
	// the CLI makes its own.
	create := c.who.Role != auth.Submitter && submitter == c.who.Name
	s, err := stage.NewTenants(c.js, create).For(ctx, submitter)
	if errors.Is(err, stage.ErrNoBucket) {
		return nil, troubleErr(fmt.Errorf("the data store of %s (%s) does not exist yet: the operator makes it with 'e31 setup --submitter %s'",
			submitter, events.DataBucketFor(submitter), submitter))
	}
	if err != nil {
		return nil, troubleErr(fmt.Errorf("the data store of %s: %w", submitter, err))
	}
	return s, nil
}

// follow calls fn with each decodable event on filter, from the first,
// until fn returns false or ctx ends, reading the log itself: for the
// auditor and the operator (and the tests, which run as the operator).
func (c *client) follow(ctx context.Context, filter string, fn func(events.Envelope) bool) error {
	cons, err := c.js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return troubleErr(fmt.Errorf("follow %s: %w", filter, err))
	}
	iter, err := cons.Messages()
	if err != nil {
		return troubleErr(fmt.Errorf("follow %s: %w", filter, err))
	}
	defer iter.Stop()
	stop := context.AfterFunc(ctx, iter.Stop)
	defer stop()
	for {
		m, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return troubleErr(fmt.Errorf("follow %s: %w", filter, err))
		}
		env, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			continue
		}
		if md, err := m.Metadata(); err == nil {
			env.Seq = md.Sequence.Stream
		}
		if !fn(env) {
			return nil
		}
	}
}
