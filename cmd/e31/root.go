package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/trace"
)

// Exit codes, the same for every command.
const (
	exitOK      = 0
	exitFailed  = 1 // the job did not succeed; the audit found a difference
	exitUsage   = 2 // bad command line or bad input (a job file with errors)
	exitTrouble = 3 // e31 could not be reached or did not answer in time
)

// exitError carries an exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{exitUsage, fmt.Errorf(format, args...)}
}
func troubleErr(err error) error { return &exitError{exitTrouble, err} }

// silent is an exit code whose message was already printed.
type silent int

func (s silent) Error() string { return fmt.Sprintf("exit %d", int(s)) }

// env is everything e31 reads from the environment, read in one place.
type env struct {
	NATS  string // E31_NATS
	Creds string // E31_CREDS
	CA    string // E31_TLS_CA
	Log   string // E31_LOG: debug, info, warn, error
	// User is the OS user: who the CLI submits as when it has no e31
	// credentials (with credentials, it is who they name).
	User string
	// BenchN is the default number of jobs for `e31 bench`: $BENCH_N.
	BenchN int
	// Trace is where spans go: the standard OTEL_* variables.
	Trace trace.Config
	// TraceParent is the caller's trace (TRACEPARENT, TRACESTATE), which
	// the command's spans and a submitted job's events continue.
	TraceParent events.Trace
	// ConfigDir is the user's configuration folder (os.UserConfigDir), where
	// `e31 dev` notes where its credentials are; "" if there is none.
	ConfigDir string
}

func readEnv() env {
	benchN, _ := strconv.Atoi(os.Getenv("BENCH_N"))
	configDir, _ := os.UserConfigDir()
	return env{NATS: os.Getenv("E31_NATS"), Creds: os.Getenv("E31_CREDS"), CA: os.Getenv("E31_TLS_CA"), Log: os.Getenv("E31_LOG"), User: client.OSUser(), BenchN: benchN, ConfigDir: configDir,
		Trace: trace.ConfigFromEnv(os.Getenv), TraceParent: events.Trace{Parent: os.Getenv("TRACEPARENT"), State: os.Getenv("TRACESTATE")}}
}

// app is what every command shares: where to connect, how to log, where
// to write.
type app struct {
	env      env
	natsURL  string
	creds    string
	tlsCA    string
	logLevel string
	out      io.Writer
	errOut   io.Writer
	log      *slog.Logger
	// flush sends the last spans on exit; set by setupTrace.
	flush func(context.Context) error
}

// connectConfig is where and as whom to connect: as the flags say, else
// the environment.
func (a *app) connectConfig(name string) connect.Config {
	return connect.Config{URL: cmp.Or(a.natsURL, a.env.NATS), Creds: cmp.Or(a.creds, a.env.Creds), CA: cmp.Or(a.tlsCA, a.env.CA), Name: name, Logger: a.log}
}

func (a *app) setupLog() error {
	level := cmp.Or(a.logLevel, a.env.Log, "info")
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return usageErr("--log-level %q: expected debug, info, warn or error", level)
	}
	a.log = slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: l}))
	slog.SetDefault(a.log)
	return nil
}

// setupTrace exports spans as the environment says, named after the
// command (e31-dev, e31-submit, e31-serve).
func (a *app) setupTrace(cmd *cobra.Command) error {
	flush, err := trace.Setup(cmd.Context(), a.env.Trace, "e31-"+cmd.Name())
	if err != nil {
		return troubleErr(err)
	}
	a.flush = flush
	return nil
}

// flushTrace sends the spans not sent yet before the process exits.
func (a *app) flushTrace() {
	if a.flush == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.flush(ctx); err != nil && a.log != nil {
		a.log.Warn("flushing the last spans", "err", err)
	}
}

func execute(args []string, stdout, stderr io.Writer) int {
	a := &app{env: readEnv(), out: stdout, errOut: stderr}
	root := &cobra.Command{
		Use:           "e31",
		Short:         "e31 runs batch jobs: describe one, collect its output in the morning",
		Long:          help("root"),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setupLog(); err != nil {
				return err
			}
			return a.setupTrace(cmd)
		},
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&a.natsURL, "nats", "", "NATS server URL (default $E31_NATS or "+connect.DefaultURL+")")
	root.PersistentFlags().StringVar(&a.creds, "creds", "", "NATS credentials file (default $E31_CREDS): who you are to e31")
	root.PersistentFlags().StringVar(&a.tlsCA, "tls-ca", "", "PEM file of the authority that signed the NATS servers' TLS certificates (default $E31_TLS_CA)")
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", "", "log level: debug, info, warn, error (default $E31_LOG or info)")
	root.AddCommand(
		devCmd(a), serveCmd(a), submitCmd(a), statusCmd(a), waitCmd(a), outputCmd(a), logsCmd(a),
		cancelCmd(a), ledgerCmd(a), auditCmd(a), eventsCmd(a), benchCmd(a), dataCmd(a),
		setupCmd(a), limitsCmd(a), credsCmd(a),
	)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer a.flushTrace()
	err := root.ExecuteContext(trace.Context(ctx, a.env.TraceParent))
	if err == nil {
		return exitOK
	}
	var s silent
	if errors.As(err, &s) {
		return int(s)
	}
	fmt.Fprintln(stderr, "e31:", strings.TrimSpace(err.Error()))
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if strings.HasPrefix(err.Error(), "unknown command") || strings.Contains(err.Error(), "accepts ") ||
		strings.Contains(err.Error(), "requires ") {
		return exitUsage
	}
	return exitCodeOf(err)
}
