package client

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
)

// Config says how to reach e31 and as whom.
type Config struct {
	// URL is the NATS server; "" is connect.DefaultURL.
	URL string
	// Creds is a credentials file (`e31 creds user`, or DIR/creds of `e31
	// dev`). "" looks for the ones an `e31 dev` on this machine wrote for
	// User, if ConfigDir is set and that `e31 dev` listens at URL, and
	// connects without credentials if there are none.
	Creds string
	// CA is a PEM file of the authority that signed the servers' TLS
	// certificates (see connect.Config).
	CA string
	// Name names the connection to the server; "" is "e31-client".
	Name string
	// User is who the client submits as when it has no e31 credentials
	// (with them, it is who they name): one token of letters, digits, '-'
	// and '_', as it ends subjects. "" is "anonymous".
	User string
	// ConfigDir is the user's configuration folder (os.UserConfigDir),
	// where `e31 dev` notes where its credentials are; "" looks for none.
	ConfigDir string
	// Logger reports disconnects, and at debug level which credentials
	// were found; nil keeps quiet.
	Logger *slog.Logger

	// resolved: Resolve has filled in the rest, and Connect need not look
	// again.
	resolved bool
}

// Client is a connection to e31 as one identity. Its methods may be called
// concurrently; Close ends them.
type Client struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	who Identity
	// refusals is told what the server refuses: a refused publish is
	// otherwise only an unanswered request.
	refusals *refusals
	// cardsKey is what audits check node cards against (SetCardsKey).
	cardsKey ed25519.PublicKey
}

// Identity is who a client acts as: what ends its requests' and cancels'
// subjects, and the user it asks the query services as.
type Identity struct {
	// Role is the role its credentials give; "" without e31 credentials.
	Role auth.Role
	// Name submits and cancels: e31.job.<id>.requested.<Name>.
	Name string
	// User asks: e31.api.<User>.….
	User string
	// Creds is the credentials file, if any.
	Creds string
}

// ReadsLog reports whether the identity may read the event log itself: the
// auditor and the operator, and anyone on a server without authentication.
func (w Identity) ReadsLog() bool { return w.Role != auth.Submitter && w.Role != auth.Service }

// String names the identity for people: its role and name.
func (w Identity) String() string {
	if w.Role == "" {
		return w.Name + " (no e31 credentials)"
	}
	return string(w.Role) + " " + w.Name
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

// Resolve fills in what Connect would find by itself: the URL's default,
// and, given no credentials, those an `e31 dev` on this machine wrote for
// User, if that is the server at URL. A deployed system's credentials stay
// explicit: no `e31 dev` noted its address.
func (cfg Config) Resolve() Config {
	if cfg.resolved {
		return cfg
	}
	cfg.resolved = true
	if cfg.URL == "" {
		cfg.URL = connect.DefaultURL
	}
	if cfg.User == "" {
		cfg.User = "anonymous"
	}
	if cfg.Name == "" {
		cfg.Name = "e31-client"
	}
	if cfg.Creds != "" || cfg.ConfigDir == "" {
		return cfg
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	creds, err := connect.DevCreds(cfg.ConfigDir, cfg.URL, cfg.User)
	switch {
	case err != nil:
		log.Debug("no e31 dev credentials", "err", err)
	case creds != "":
		log.Debug("using the credentials e31 dev wrote for you", "creds", creds, "user", cfg.User)
		cfg.Creds = creds
	default:
		log.Debug("no credentials given, and no e31 dev on this machine noted any for you", "nats", cfg.URL, "user", cfg.User)
	}
	return cfg
}

// identity reads who the client acts as from its credentials. Without e31
// credentials it submits as the user and asks as the operator: a server
// without authentication lets anyone do anything, and a server with it
// refuses such a client before it asks anything.
func identity(creds, user string) (Identity, error) {
	if creds == "" {
		return Identity{Name: user, User: events.Operator}, nil
	}
	c, err := auth.ReadCreds(creds)
	if err != nil {
		return Identity{}, kind(ErrCredentials, err)
	}
	id, err := c.Identity()
	if errors.Is(err, auth.ErrNotE31) {
		return Identity{Name: user, User: user, Creds: creds}, nil
	}
	if err != nil {
		return Identity{}, kind(ErrCredentials, fmt.Errorf("%s: %w", creds, err))
	}
	return Identity{Role: id.Role, Name: id.Principal(), User: id.Principal(), Creds: creds}, nil
}

// Connect connects as cfg says, failing fast when nothing answers: the
// error then wraps ErrUnreachable, or ErrAuthentication if the server
// refused the credentials.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.Resolve()
	w, err := identity(cfg.Creds, cfg.User)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts := []nats.Option{nats.Name(cfg.Name), nats.Timeout(5 * time.Second)}
	more, err := connect.SecurityOptions(connect.Config{URL: cfg.URL, Creds: cfg.Creds, CA: cfg.CA, Name: cfg.Name, Logger: cfg.Logger})
	if err != nil {
		return nil, kind(ErrCredentials, err)
	}
	opts = append(opts, more...)
	if w.Role == "" {
		// No e31 credentials name an inbox: reply on the one of the user
		// the client asks as, the only one the query services answer on.
		opts = append(opts, nats.CustomInboxPrefix(query.InboxPrefix(w.User)))
	}
	r := &refusals{waiting: map[*refusalWatch]struct{}{}}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			r.refused(err)
		}
	}))
	nc, err := nats.Connect(cfg.URL, opts...)
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
		err = fmt.Errorf("NATS at %s refused the connection: %v", cfg.URL, err)
		if cfg.Creds != "" {
			err = fmt.Errorf("%v: the credentials in %s are not accepted: expired, revoked, or for another system", err, cfg.Creds)
		}
		return nil, kind(ErrAuthentication, err)
	}
	if err != nil {
		return nil, kind(ErrUnreachable, fmt.Errorf("cannot reach NATS at %s: %v", cfg.URL, err))
	}
	js, err := connect.Ready(dctx, nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("NATS at %s does not answer JetStream requests: %w", nc.ConnectedUrl(), err)
	}
	return &Client{nc: nc, js: js, who: w, refusals: r}, nil
}

// Close closes the connection.
func (c *Client) Close() { c.nc.Close() }

// Who is who the client acts as.
func (c *Client) Who() Identity { return c.who }

// Conn is the client's NATS connection, for what this package does not do.
func (c *Client) Conn() *nats.Conn { return c.nc }

// JetStream is the client's JetStream handle, for what this package does
// not do.
func (c *Client) JetStream() jetstream.JetStream { return c.js }

// Guard returns a context that ends as soon as the server refuses a
// publish on one of subjects: a refused publish then fails at once, not at
// its timeout, and context.Cause says why. Call the returned function when
// done.
func (c *Client) Guard(ctx context.Context, subjects ...string) (context.Context, context.CancelFunc) {
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
// clear one, wrapping ErrNotPermitted; others are wrapped with what.
func (c *Client) refused(ctx context.Context, what string, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, nats.ErrPermissionViolation) {
		return fmt.Errorf("%s: %w: the credentials of %s do not allow it (%v)", what, ErrNotPermitted, c.who, cause)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// NeedLog refuses early what only readers of the log may do: it returns an
// error wrapping ErrNotPermitted, naming what, unless the client may read
// the event log itself.
func (c *Client) NeedLog(what string) error {
	if c.who.ReadsLog() {
		return nil
	}
	return fmt.Errorf("%s reads the event log itself: %w for %s; it needs the auditor's or the operator's credentials", what, ErrNotPermitted, c.who)
}

// Append records ev about job as the client's identity. It returns
// bus.ErrConflict as it is (a condition that opts set did not hold), and
// wraps ErrNotPermitted if the server refused it.
func (c *Client) Append(ctx context.Context, job string, ev events.Event, opts ...bus.AppendOption) (events.Envelope, error) {
	subject, err := events.SubjectOf(job, ev)
	if err != nil {
		return events.Envelope{}, kind(ErrInvalid, err)
	}
	gctx, done := c.Guard(ctx, subject)
	defer done()
	env, err := bus.NewPublisher(c.js, "e31/cli", nil).Append(gctx, job, ev, opts...)
	if err != nil && !errors.Is(err, bus.ErrConflict) {
		return env, c.refused(gctx, fmt.Sprintf("%s of %s", events.Name(ev.Type()), job), err)
	}
	return env, err
}

// request sends a query, as the client's user, to subject, and decodes the
// reply. A "busy" reply (the service is at a limit: see pkg/query) is
// asked again, with backoff, until timeout.
func (c *Client) request(ctx context.Context, subject string, req, reply any, timeout time.Duration) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	gctx, done := c.Guard(rctx, subject)
	defer done()
	m, busy, err := query.RequestWhileBusy(gctx, c.nc, subject, b)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return kind(ErrNotRunning, fmt.Errorf("nothing answers %s: is the %s service running?", subject, serviceOf(subject)))
	case err != nil && busy != "" && !errors.Is(context.Cause(gctx), nats.ErrPermissionViolation) && ctx.Err() == nil:
		return fmt.Errorf("%s: %w: %s (%s)", subject, ErrBusy, busy, timeout)
	case err != nil:
		return c.refused(gctx, subject, err)
	}
	// goccy/go-json reads what encoding/json does at about twice the
	// speed: `e31 audit` and `e31 ledger` read every record of the ledger.
	if err := gojson.Unmarshal(m.Data, reply); err != nil {
		return fmt.Errorf("%s: bad reply: %w", subject, err)
	}
	return nil
}

// ledger is the subject of one of the ledger's endpoints for the client's
// user.
func (c *Client) ledger(endpoint string) string { return wire.LedgerSubject(c.who.User, endpoint) }

// serviceOf names the service a query subject asks, for errors.
func serviceOf(subject string) string {
	if s := wire.ServiceOf(subject); s != "" {
		return s
	}
	return "ledger"
}

// validJob refuses what is not a job id before anything is asked.
func validJob(job string) error {
	if !events.ValidID(job) {
		return kind(ErrInvalid, fmt.Errorf("%q is not a job id", job))
	}
	return nil
}
