package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/gate"
	"github.com/e31net/e31/services/ledger"
	"github.com/e31net/e31/services/output"
	"github.com/e31net/e31/services/release"
	"github.com/e31net/e31/services/rent"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/submit"
)

// Services lists the services NewService builds, in the order of a job's
// life.
var Services = []string{"submit", "rent", "run", "output", "release", "ledger"}

// ErrUnknownService is returned by NewService for a name not in Services.
var ErrUnknownService = errors.New("stack: unknown service")

// Runner is one service ready to run until its context ends.
type Runner interface {
	Run(ctx context.Context) error
}

// Configs holds the Config of each service. Its zero value builds every
// service with its defaults, except RUN, whose node must be named and sized.
type Configs struct {
	Submit  submit.Config
	Rent    rent.Config
	Run     run.Config
	Output  output.Config
	Release release.Config
	Ledger  ledger.Config
}

// NewService builds the service called name from its Config in cfgs, with
// log as its logger when its Config has none.
func NewService(name string, nc *nats.Conn, js jetstream.JetStream, cfgs Configs, log *slog.Logger) (Runner, error) {
	switch name {
	case "submit":
		cfg := cfgs.Submit
		cfg.Logger = orLogger(cfg.Logger, log)
		return submit.New(js, cfg)
	case "rent":
		cfg := cfgs.Rent
		cfg.Logger = orLogger(cfg.Logger, log)
		return rent.New(nc, js, cfg)
	case "run":
		cfg := cfgs.Run
		cfg.Logger = orLogger(cfg.Logger, log)
		if cfg.Gate == nil && cfg.Store == nil && cfg.Stores == nil {
			// A node reaches its consumers and its jobs' data through
			// the gate, as its credentials (the NODES account) let it.
			cfg.Gate = gate.NewClient(nc, cfg.Node)
		}
		return run.New(js, cfg)
	case "output":
		cfg := cfgs.Output
		cfg.Logger = orLogger(cfg.Logger, log)
		return output.New(js, cfg)
	case "release":
		cfg := cfgs.Release
		cfg.Logger = orLogger(cfg.Logger, log)
		return release.New(js, cfg)
	case "ledger":
		cfg := cfgs.Ledger
		cfg.Logger = orLogger(cfg.Logger, log)
		return ledger.New(nc, js, cfg)
	}
	return nil, fmt.Errorf("%w %q (expected one of %v)", ErrUnknownService, name, Services)
}

func orLogger(l, def *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return def
}
