package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/stack"
)

func serveCmd(a *app) *cobra.Command {
	// The services' own flags, defaults and all, as their mains define
	// them: 'e31 serve NAME' builds NAME from the same Config.
	var cfgs stack.Configs
	var httpOpts httpOptions
	cmd := &cobra.Command{
		Use:       "serve SERVICE",
		Short:     "Run one service against an external NATS: submit, rent, run, output, release, ledger, or web (the page)",
		Long:      help("serve", "{http}", help("http")),
		Args:      cobra.ExactArgs(1),
		ValidArgs: stack.Serveable,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, name := cmd.Context(), args[0]
			if !slices.Contains(stack.Serveable, name) {
				return usageErr("unknown service %q (expected one of %v)", name, stack.Serveable)
			}
			if name == "run" {
				// Before connecting: a node that cannot isolate its jobs
				// refuses to run them, unless --executor process says to.
				if err := run.CheckExecutor(cfgs.Run.ExecutorKind); err != nil {
					return usageErr("%v", err)
				}
			}
			cfg := a.connectConfig("e31-" + name)
			// Credentials made for another service or node are refused at
			// once: the server would refuse what it does, a publish at a time.
			if cfg.Creds != "" {
				id, err := auth.ReadIdentity(cfg.Creds)
				switch {
				case errors.Is(err, auth.ErrNotE31):
				case err != nil:
					return usageErr("--creds: %v", err)
				default:
					if err := id.MayServe(name, cfgs.Run.Node); err != nil {
						return usageErr("--creds %s %v", cfg.Creds, err)
					}
				}
			}
			page, err := httpOpts.pageConfig()
			if err != nil {
				return err
			}
			nc, js, err := connect.Dial(ctx, cfg)
			if err != nil {
				return troubleErr(err)
			}
			defer nc.Close()
			err = stack.RunAlone(ctx, stack.AloneConfig{Name: name, NC: nc, JS: js, Configs: cfgs, Addr: httpOpts.addr, Token: page.Token, Page: page, Logger: a.log})
			var lerr *stack.ListenError
			switch {
			case errors.As(err, &lerr):
				return httpOpts.listenErr(lerr.Err)
			case errors.Is(err, run.ErrNoIsolation):
				return usageErr("serve %s: %v", name, err)
			case err != nil:
				return fmt.Errorf("serve %s: %w", name, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	serviceFlags(f, "run", cfgs.Run.Flags)
	httpOpts.flags(f, "")
	serviceFlags(f, "rent", cfgs.Rent.Flags)
	return cmd
}

// serviceFlags adds to f the flags a service defines for its own main,
// their help starting with whose they are ("run", "each node").
func serviceFlags(f *pflag.FlagSet, whose string, define func(*flag.FlagSet)) {
	goFlags(f, func(fs *flag.FlagSet) {
		define(fs)
		fs.VisitAll(func(fl *flag.Flag) { fl.Usage = whose + ": " + fl.Usage })
	})
}

// goFlags adds to f the flags define defines on a Go flag.FlagSet.
func goFlags(f *pflag.FlagSet, define func(*flag.FlagSet)) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	define(fs)
	f.AddGoFlagSet(fs)
}
