package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/bench"
	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/jobfile"
)

// The `e31 bench` commands are flags over package bench, which measures
// and writes the figures.

func benchCmd(a *app) *cobra.Command {
	o := bench.LifeOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure jobs per second through the whole life of a job on this machine",
		Long: `Start e31 dev in a temporary directory and run trivial jobs (/bin/true)
through all five steps, with durable storage:

  idle:  jobs submitted one at a time, each after the last was released: the
         latency of each step on an idle pool (start_p50_ms, released_p50_ms);
  burst: --jobs jobs submitted at once: throughput (jobs_per_s) and latency
         under load (burst_*).

In the same run it measures the floor: plain fork/exec of /bin/true from Go,
as many at once as there are cores. The last line is one machine-readable
summary. BENCH_N sets --jobs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Jobs <= 0 {
				o.Jobs = a.env.BenchN
			}
			if o.Jobs <= 0 {
				o.Jobs = 2000
			}
			// The system under measure logs warnings only, unless asked.
			o.Logger = a.log.WithGroup("dev")
			if a.logLevel == "" && a.env.Log == "" {
				quiet := *a
				quiet.logLevel = "warn"
				_ = quiet.setupLog()
				o.Logger = quiet.log
			}
			return benchErr(bench.Life(cmd.Context(), a.out, o))
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Jobs, "jobs", 0, "jobs in the burst (default $BENCH_N or 2000)")
	f.IntVar(&o.Idle, "idle", 100, "jobs submitted one at a time on the idle pool")
	f.StringVar(&o.Sync, "sync", "always", "event store durability: always or interval")
	f.StringVar(&o.Executor, "executor", "auto", "sandbox, process or auto")
	f.IntVar(&o.Nodes, "nodes", 1, "compute nodes")
	f.BoolVar(&o.Keep, "keep", false, "keep the temporary directory")
	f.BoolVar(&o.Metrics, "metrics", false, "observe every handler and the scheduler and gather the metrics each second, as e31 dev with Prometheus does")
	f.StringVar(&o.Profile, "cpuprofile", "", "write a CPU profile of the burst to this file")
	cmd.AddCommand(benchSchedulerCmd(a))
	cmd.AddCommand(benchStageCmd(a))
	cmd.AddCommand(benchLedgerCmd(a))
	cmd.AddCommand(benchHistoryCmd(a))
	return cmd
}

// benchErr gives a measure's error its exit code: a run that went wrong
// is a failure (its figures are printed), a server that would not start is
// trouble.
func benchErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bench.ErrFailed):
		return &exitError{exitFailed, err}
	case errors.Is(err, broker.ErrSync), errors.Is(err, bench.ErrUsage):
		return &exitError{exitUsage, err}
	case errors.Is(err, bench.ErrNATS):
		return troubleErr(err)
	}
	return err
}

func benchSchedulerCmd(a *app) *cobra.Command {
	var o bench.SchedulerOptions
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Measure RENT with a deep queue: decisions per second and memory per queued job",
		Long: `Queue --jobs jobs over --nodes node announcements, as real events on an
embedded server, then start RENT alone: it rebuilds from the log and holds
what fits; a releaser gives every hold back at once, so RENT keeps deciding
with the queue still deep. Reports the rebuild time, decisions per second end
to end, the cost of one decision at a short and at the full queue (in memory),
and the heap per queued job.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchErr(bench.Scheduler(cmd.Context(), a.out, o))
		},
	}
	cmd.Flags().IntVar(&o.Jobs, "jobs", 100000, "jobs queued")
	cmd.Flags().IntVar(&o.Nodes, "nodes", 1000, "nodes announced")
	cmd.Flags().IntVar(&o.Decisions, "decisions", 20000, "holds to measure end to end")
	cmd.Flags().StringVar(&o.Profile, "cpuprofile", "", "write a CPU profile of the measured decisions to this file, and allocation profiles to FILE.alloc0 (start) and FILE.alloc (end)")
	cmd.Flags().DurationVar(&o.Stall, "stall", time.Minute, "fail if no hold comes for this long")
	return cmd
}

func benchStageCmd(a *app) *cobra.Command {
	var o bench.StageOptions
	var large, smallSize string
	cmd := &cobra.Command{
		Use:   "stage",
		Short: "Measure staging and output throughput (MB/s) against the raw disk write rate",
		Long: `Start an embedded NATS JetStream server in a temporary directory, as e31 dev
does, and move one large file and a folder of many small files through the
data store the way a job's data and output travel:

  stage in:  the client uploads (hashing included), the node downloads;
  output:    the node collects (hashing included), the client fetches.

Every byte is checked against its digest on the way, as in production. In
the same run, on the same disk, it measures the raw write rate: one file of
the large size written and fsynced. The last line is one machine-readable
summary.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.Large, err = jobfile.ParseSize(large); err != nil {
				return usageErr("--large: %v", err)
			}
			if o.SmallSize, err = jobfile.ParseSize(smallSize); err != nil {
				return usageErr("--small-size: %v", err)
			}
			if o.Large <= 0 || o.SmallFiles <= 0 || o.SmallSize <= 0 {
				return usageErr("--large, --small-files and --small-size must be positive")
			}
			return benchErr(bench.Stage(cmd.Context(), a.out, o))
		},
	}
	f := cmd.Flags()
	f.StringVar(&large, "large", "1GiB", "size of the one large file")
	f.IntVar(&o.SmallFiles, "small-files", 10000, "number of small files")
	f.StringVar(&smallSize, "small-size", "4KiB", "size of each small file")
	f.StringVar(&o.Sync, "sync", "always", "event store durability: always (as e31 dev) or interval")
	f.BoolVar(&o.Keep, "keep", false, "keep the temporary directory")
	return cmd
}

func benchLedgerCmd(a *app) *cobra.Command {
	var o bench.LedgerOptions
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Measure the audit's replay rate and the ledger's rebuild time over a long log",
		Long: `Write --events synthetic but valid job events (about 8 a job: successes,
failures, cancels, lost nodes held again, rejections, deletions, over 16 nodes)
into an embedded server with --sync interval, then time on this machine:

  audit:  'e31 audit's independent replay of the whole log: reading every
          message, digests and the hash chain, rebuilding every record and
          every check (events per second);
  ledger: the LEDGER rebuilding every record and its chain from scratch, from
          start until it has caught up with the log.

Both must find the log whole and agree on its chain head. The last line is
one machine-readable summary.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Events <= 0 {
				return usageErr("--events must be positive")
			}
			return benchErr(bench.Ledger(cmd.Context(), a.out, o))
		},
	}
	cmd.Flags().IntVar(&o.Events, "events", 1_000_000, "events to write")
	cmd.Flags().StringVar(&o.Profile, "cpuprofile", "", "write CPU profiles of the audit's replay to this file, and of the ledger's rebuild to FILE.ledger")
	cmd.Flags().BoolVar(&o.Keep, "keep", false, "keep the temporary directory")
	return cmd
}

func benchHistoryCmd(a *app) *cobra.Command {
	var o bench.HistoryOptions
	cmd := &cobra.Command{Use: "history", Short: bench.HistoryShort, Long: bench.HistoryLong, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return benchErr(bench.History(cmd.Context(), a.out, o)) }}
	cmd.Flags().IntVar(&o.Jobs, "jobs", 1_000_000, "finished jobs written")
	cmd.Flags().BoolVar(&o.Keep, "keep", false, "keep the temporary directory")
	cmd.Flags().StringSliceVar(&o.Services, "services", nil, "measure only these (default ledger,rent,output)")
	return cmd
}
