package bench

import (
	"flag"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
)

// The flags of `e31 bench` and its measures, defaults and all, defined on
// a Go flag.FlagSet as each service's Config defines its own: the command
// adds them, and each measure's Check says what cannot be measured.

// Flags defines o's flags on fs. Jobs defaults to 0: the command gives it
// $BENCH_N, or 2000.
func (o *LifeOptions) Flags(fs *flag.FlagSet) {
	fs.IntVar(&o.Jobs, "jobs", 0, "jobs in the burst (default $BENCH_N or 2000)")
	fs.IntVar(&o.Idle, "idle", 100, "jobs submitted one at a time on the idle pool")
	fs.StringVar(&o.Sync, "sync", "always", "event store durability: always or interval")
	fs.StringVar(&o.Executor, "executor", "auto", "sandbox, process or auto")
	fs.IntVar(&o.Nodes, "nodes", 1, "compute nodes")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temporary directory")
	fs.BoolVar(&o.Metrics, "metrics", false, "observe every handler and the scheduler and gather the metrics as deploy/'s Prometheus scrapes them")
	fs.StringVar(&o.Profile, "cpuprofile", "", "write a CPU profile of the burst to this file, and allocation profiles to FILE.alloc0 (start) and FILE.alloc (end)")
}

// Flags defines o's flags on fs.
func (o *ObserveOptions) Flags(fs *flag.FlagSet) {
	fs.IntVar(&o.Pairs, "pairs", 6, "pairs of runs")
	fs.IntVar(&o.Jobs, "jobs", 2000, "jobs in each burst")
	fs.StringVar(&o.Sync, "sync", "always", "event store durability: always or interval")
	fs.StringVar(&o.Executor, "executor", "auto", "sandbox, process or auto")
}

// Flags defines o's flags on fs.
func (o *SchedulerOptions) Flags(fs *flag.FlagSet) {
	fs.IntVar(&o.Jobs, "jobs", 100000, "jobs queued")
	fs.IntVar(&o.Nodes, "nodes", 1000, "nodes announced")
	fs.IntVar(&o.Decisions, "decisions", 20000, "holds to measure end to end")
	fs.StringVar(&o.Profile, "cpuprofile", "", "write a CPU profile of the measured decisions to this file, and allocation profiles to FILE.alloc0 (start) and FILE.alloc (end)")
	fs.DurationVar(&o.Stall, "stall", time.Minute, "fail if no hold comes for this long")
	fs.BoolVar(&o.Renew, "renew", false, "the nodes renew their leases as run nodes do, at the production lease time: also measure what that costs alone, and count the nodes RENT finds lost")
	fs.StringVar(&o.Sync, "sync", "interval", "event store durability: interval or always (as e31 dev)")
	fs.DurationVar(&o.LeaseTTL, "lease-ttl", events.DefaultLeaseTTL, "with --renew, the lease time (as e31 setup --lease-ttl)")
}

// Flags defines o's flags on fs; sizes are written as in a job file
// (4KiB, 1GiB).
func (o *StageOptions) Flags(fs *flag.FlagSet) {
	jobfile.SizeVar(fs, &o.Large, "large", jobfile.GiB, "size of the one large file")
	fs.IntVar(&o.SmallFiles, "small-files", 10000, "number of small files")
	jobfile.SizeVar(fs, &o.SmallSize, "small-size", 4*jobfile.KiB, "size of each small file")
	fs.StringVar(&o.Sync, "sync", "always", "event store durability: always (as e31 dev) or interval")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temporary directory")
}

// Check says, wrapping ErrUsage, why o cannot be measured.
func (o StageOptions) Check() error {
	if o.Large <= 0 || o.SmallFiles <= 0 || o.SmallSize <= 0 {
		return usage("--large, --small-files and --small-size must be positive")
	}
	return nil
}

// Flags defines o's flags on fs.
func (o *LedgerOptions) Flags(fs *flag.FlagSet) {
	fs.IntVar(&o.Events, "events", 1_000_000, "events to write")
	fs.StringVar(&o.Profile, "cpuprofile", "", "write CPU profiles of the audit's replay to this file, of the ledger's rebuild to FILE.ledger, of this process (the server and the ledger) while e31 audit runs to FILE.whole, and of e31 audit itself to FILE.audit; the heap the audit holds at its end to FILE.heap")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temporary directory")
}

// Check says, wrapping ErrUsage, why o cannot be measured.
func (o LedgerOptions) Check() error {
	if o.Events <= 0 {
		return usage("--events must be positive")
	}
	return nil
}

// usage is an error of options, which wraps ErrUsage, saying what is
// wrong and no more.
type usage string

func (u usage) Error() string      { return string(u) }
func (usage) Is(target error) bool { return target == ErrUsage }
