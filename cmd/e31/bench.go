package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/bench"
	"github.com/e31net/e31/pkg/broker"
)

// The `e31 bench` commands are flags over package bench, which measures
// and writes the figures.

func benchCmd(a *app) *cobra.Command {
	o := bench.LifeOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure jobs per second through the whole life of a job on this machine",
		Long:  help("bench"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Jobs <= 0 {
				o.Jobs = cmp.Or(max(a.env.BenchN, 0), 2000)
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
	goFlags(cmd.Flags(), o.Flags)
	cmd.AddCommand(benchSchedulerCmd(a))
	cmd.AddCommand(benchStageCmd(a))
	cmd.AddCommand(benchLedgerCmd(a))
	cmd.AddCommand(benchHistoryCmd(a))
	cmd.AddCommand(benchObserveCmd(a))
	return cmd
}

func benchObserveCmd(a *app) *cobra.Command {
	var o bench.ObserveOptions
	cmd := &cobra.Command{
		Use:   "observe",
		Short: "Measure what metrics and tracing cost: bursts with them off and on, alternated, in one run",
		Long:  help("bench-observe"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchErr(bench.Observe(cmd.Context(), a.out, o))
		},
	}
	goFlags(cmd.Flags(), o.Flags)
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
		Long:  help("bench-scheduler"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchErr(bench.Scheduler(cmd.Context(), a.out, o))
		},
	}
	goFlags(cmd.Flags(), o.Flags)
	return cmd
}

func benchStageCmd(a *app) *cobra.Command {
	var o bench.StageOptions
	cmd := &cobra.Command{
		Use:   "stage",
		Short: "Measure staging and output throughput (MB/s) against the raw disk write rate",
		Long:  help("bench-stage"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Check(); err != nil {
				return benchErr(err)
			}
			return benchErr(bench.Stage(cmd.Context(), a.out, o))
		},
	}
	goFlags(cmd.Flags(), o.Flags)
	return cmd
}

func benchLedgerCmd(a *app) *cobra.Command {
	var o bench.LedgerOptions
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Measure the audit's replay rate and the ledger's rebuild time over a long log",
		Long:  help("bench-ledger"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Check(); err != nil {
				return benchErr(err)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("bench ledger: find this e31 binary, whose audit it times: %w", err)
			}
			o.E31 = exe
			return benchErr(bench.Ledger(cmd.Context(), a.out, o))
		},
	}
	goFlags(cmd.Flags(), o.Flags)
	return cmd
}

func benchHistoryCmd(a *app) *cobra.Command {
	var o bench.HistoryOptions
	cmd := &cobra.Command{Use: "history", Short: "Measure each service's heap and restart time after a long history of jobs",
		Long: help("bench-history"), Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return benchErr(bench.History(cmd.Context(), a.out, o)) }}
	goFlags(cmd.Flags(), o.Flags)
	return cmd
}
