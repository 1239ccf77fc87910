package rent

import (
	"flag"
	"log/slog"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query"
)

// Config configures the service. It is the one way the service is built,
// by its own main, `e31 serve rent` and `e31 dev` alike: the zero value is a
// working service, and New fills in the defaults of the fields left zero.
type Config struct {
	// Source is the CloudEvents source it stamps; default
	// events.DefaultSource ("e31/rent/HOST").
	Source string
	Logger *slog.Logger
	Now    func() time.Time
	// Instance names this instance: its consumer and its claim to lead.
	// Default: the host name.
	Instance string
	Pool     PoolConfig
	// Queries bounds what askers may hold of the why endpoint at once
	// (zero fields: query's defaults).
	Queries query.Limits
	// Observer, if set, is told what the scheduler does, for the
	// operator's metrics (pkg/metrics.Scheduler implements it).
	Observer Observer
	// NodeCardsKey is the operator's card key (its text, "ed25519:…", or
	// a file that holds it, as cards.pub does): nodes are held to the
	// cards it signed (PoolConfig.Cards). Empty: nodes are taken at their
	// word.
	NodeCardsKey string
	// RequireNodeCards holds nothing on a node without a valid card.
	RequireNodeCards bool
	// LapseMargin is how long after it sees a node's lease gone RENT
	// waits before it counts the node lost: see pkg/lease. Zero: a fifth
	// of the lease's TTL.
	LapseMargin time.Duration
}

// Flags defines on fs the flags that set c: the instance's name, the lapse
// margin, and how nodes' cards are checked.
func (c *Config) Flags(fs *flag.FlagSet) {
	// Each instance reads the log on a consumer named after it: two
	// instances on one host need names of their own.
	fs.StringVar(&c.Instance, "instance", "", "this instance's name, for its consumer of the log (default: the host name; give each instance on one host its own)")
	fs.DurationVar(&c.LapseMargin, "lapse-margin", 0, "how long after a node's lease is seen gone RENT waits before it counts the node lost and holds its jobs again: room for clock drift between the node and the NATS servers (default a fifth of the lease TTL)")
	fs.StringVar(&c.NodeCardsKey, "node-cards-key", "", "the operator's card key (cards.pub of 'e31 creds init', or its text ed25519:...): a node is held to the capacity of the card it signed")
	fs.BoolVar(&c.RequireNodeCards, "require-node-cards", false, "hold nothing on a node that presents no card signed by --node-cards-key")
}

// PoolConfig tunes the pool.
type PoolConfig struct {
	// Grace bounds how long past its limit a job may hold its node (the
	// stop's grace period, collecting output, releasing). Backfill counts on
	// every job being gone by then.
	Grace time.Duration
	// MaxScan bounds the waiting jobs one pass looks at, so that a queue of
	// a hundred thousand jobs costs no more per decision than a short one.
	MaxScan int
	// RememberLost is how long a node whose lease lapsed still counts when
	// a job is judged on whether any node could ever hold it. Default:
	// DefaultRememberLost.
	RememberLost time.Duration
	// RememberEnded is how many of the jobs that ended last the pool
	// remembers (and how many cancels of jobs it has not seen): default
	// DefaultRememberEnded.
	RememberEnded int
	// Cards says whether nodes are held to the cards the operator signed
	// for them (card.go).
	Cards Cards
	// SetAside, if set, is told of each node's event the pool sets aside:
	// a stop from a node other than heldOn, the one its attempt is held
	// on (events.FromHolder). The Service logs it.
	SetAside func(env events.Envelope, heldOn string)
}

// DefaultRememberEnded is how many ended jobs the pool remembers. Once a
// job is over, the events that may still come about it (a late cancel, the
// log's copy of what RENT appended and applied already) come within
// moments, and a job that runs after one that ended long ago has its
// outcome read from the log: a hundred thousand is ample and costs a few
// MiB, whatever the history.
const DefaultRememberEnded = 100_000

// DefaultRememberLost is how long a lost node (its lease lapsed) still
// counts for whether a newly queued job could ever be held. Run nodes come
// back after a crash, a reboot or an upgrade within minutes: a job submitted
// meanwhile that only such a node can hold waits for it rather than being
// rejected. Fifteen minutes covers a reboot of a large machine with room to
// spare; a node gone longer is taken to be gone for good, so that retiring
// one does not leave jobs that nothing else can run waiting for it.
//
// It bounds only that judgement, made once when a job first enters the
// queue. A job judged able to run waits however long its node is away, and
// a job held once and lost with its node is never judged again: a lost node
// is never the job's fault.
const DefaultRememberLost = 15 * time.Minute

// withDefaults is c with its zero fields set to their defaults.
func (c PoolConfig) withDefaults() PoolConfig {
	if c.Grace <= 0 {
		c.Grace = time.Minute
	}
	if c.MaxScan <= 0 {
		c.MaxScan = 2000
	}
	if c.RememberLost <= 0 {
		c.RememberLost = DefaultRememberLost
	}
	if c.RememberEnded <= 0 {
		c.RememberEnded = DefaultRememberEnded
	}
	return c
}
