package retry

import "time"

// The policies, one per use: every cap on trying again in e31 is here.
var (
	// Consumer makes a consumer (a subscription's durable, a follower's
	// ordered one) while the server restarts or a cluster elects a
	// leader: soon, and for as long as the service runs.
	Consumer = Policy{First: 100 * time.Millisecond, Max: 2 * time.Second}

	// Follow reads the log again after the reading stopped: a projection
	// (OUTPUT's, the metrics') stands still meanwhile, and says so.
	Follow = Policy{First: 250 * time.Millisecond, Max: 5 * time.Second}

	// StreamGone is how long a follower keeps trying (with Consumer's
	// pauses) while the log's stream is not found: a restarting cluster
	// knows its streams again within seconds; a stream that stays gone was
	// deleted, and a projection that waited for it for ever would lead or
	// answer from a log that no longer exists.
	StreamGone = 10 * time.Second

	// Watch watches the node leases again after the watch failed.
	Watch = Policy{First: 250 * time.Millisecond, Max: 5 * time.Second}

	// Schedule is RENT's pause after a scheduling pass failed; a new
	// event wakes it sooner.
	Schedule = Policy{First: 50 * time.Millisecond, Max: 5 * time.Second}

	// Step is one step of a job on its node (opening the store, staging,
	// collecting, storing logs): a server restarting is no fault of the
	// job, but after two minutes the job fails rather than hangs.
	Step = Policy{First: 100 * time.Millisecond, Max: 5 * time.Second, For: 2 * time.Minute}

	// Record is RUN recording how a job stopped: the result is only on
	// the node until it is in the log.
	Record = Policy{First: 50 * time.Millisecond, Max: 5 * time.Second, For: 2 * time.Minute}

	// Rejoin is a node joining the pool again after it lost its lease.
	Rejoin = Policy{First: 250 * time.Millisecond, Max: 5 * time.Second}

	// Timers is OUTPUT setting retention timers: ones not set are set
	// again when OUTPUT restarts, but a deletion should not wait that long.
	Timers = Policy{First: 100 * time.Millisecond, Max: 30 * time.Second, For: 2 * time.Minute}

	// Service is a daemon starting a service again after it failed for a
	// reason that passes.
	Service = Policy{First: 250 * time.Millisecond, Max: 15 * time.Second}

	// Busy asks a service that answered busy (at a limit: pkg/query)
	// again: soon at first, at most every 2 s, spread out so that many
	// clients turned away together do not come back together.
	Busy = Policy{First: 100 * time.Millisecond, Max: 2 * time.Second}

	// Setup is `e31 setup` creating streams on a fresh cluster, which
	// fails until every peer is known and a meta leader elected: every
	// failure is tried again until the command's --timeout.
	Setup = Policy{First: 100 * time.Millisecond, Max: 2 * time.Second}

	// Absent asks a service that nothing answers for again, for a client
	// that waits on it (`e31 wait`): one restarting, or being upgraded,
	// listens again once it has read its state.
	Absent = Policy{First: 200 * time.Millisecond, Max: time.Second, For: 30 * time.Second}

	// Ready asks a fresh server or cluster whether JetStream answers yet.
	Ready = Policy{First: 50 * time.Millisecond, Max: 500 * time.Millisecond}
)
