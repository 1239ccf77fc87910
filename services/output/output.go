// Package output is the OUTPUT step. RUN collects what a job left under /out
// into the store as it stops; OUTPUT checks that every collected file is
// stored intact, decides the attempt's final outcome (a job that exited 0
// without a required output did not succeed; one that did not finish
// returns what it had, marked partial) and records OutputReturned.
package output

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// Verifier checks that one returned file is stored intact. It returns an
// error wrapping ErrDamaged when the file is missing or does not match its
// digest, and any other error when it could not tell (the check is retried).
type Verifier interface {
	VerifyFile(ctx context.Context, f events.OutputFile) error
}

// ErrDamaged marks a returned file that is missing from the store or does
// not match its digest.
var ErrDamaged = errors.New("output: stored file is missing or damaged")

// Config configures the service.
type Config struct {
	Source   string
	Logger   *slog.Logger
	Now      func() time.Time
	Verifier Verifier
}

// Service is the OUTPUT step; any number may run.
type Service struct {
	js     jetstream.JetStream
	pub    *bus.Publisher
	log    *slog.Logger
	verify Verifier
}

// New returns a Service on js.
func New(js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Verifier == nil {
		return nil, errors.New("output: a Verifier is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Source == "" {
		cfg.Source = "e31/output"
	}
	return &Service{js: js, pub: bus.NewPublisher(js, cfg.Source, cfg.Now), log: cfg.Logger.With("service", "output"), verify: cfg.Verifier}, nil
}

// Run handles events until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Setup(ctx, s.js, events.StreamOptions{}); err != nil {
		return err
	}
	return bus.Run(ctx, s.js, s.pub, "output", s.log, bus.Handler{
		Name:       "output",
		Topic:      events.KindSubject(events.TypeRunStopped),
		Subscriber: bus.SubscriberConfig{Durable: "output", Lanes: 16},
		Handle:     s.Handle,
	})
}

// Handle verifies what a stopped job left and records it as returned.
func (s *Service) Handle(ctx context.Context, env events.Envelope) error {
	stopped, ok := env.Event.(*events.RunStopped)
	if !ok {
		return nil
	}
	var damaged []string
	for _, f := range stopped.Output.Files {
		err := s.verify.VerifyFile(ctx, f)
		switch {
		case err == nil:
		case errors.Is(err, ErrDamaged):
			s.log.Warn("returned file is damaged", "job", env.Subject, "path", f.Path, "err", err)
			damaged = append(damaged, f.Path)
		default:
			return fmt.Errorf("verify %s of %s: %w", f.Path, env.Subject, err)
		}
	}
	stored, err := s.pub.React(ctx, env, func(after []events.Envelope) ([]events.Event, error) {
		return Decide(*stopped, damaged, after), nil
	})
	if err != nil {
		return fmt.Errorf("return output of %s attempt %d: %w", env.Subject, stopped.Attempt, err)
	}
	for _, e := range stored {
		s.log.Info("output returned", "job", env.Subject, "attempt", stopped.Attempt, "files", len(stopped.Output.Files), "seq", e.Seq)
	}
	return nil
}

// Decide is what OUTPUT appends for a stopped attempt: nothing if its output
// was already returned; otherwise the verified files and the final outcome.
// damaged lists collected files that failed verification: they are not
// returned, and the job is not reported as succeeded without them.
func Decide(stopped events.RunStopped, damaged []string, after []events.Envelope) []events.Event {
	for _, e := range after {
		if r, ok := e.Event.(*events.OutputReturned); ok && r.Attempt == stopped.Attempt {
			return nil
		}
	}
	bad := make(map[string]bool, len(damaged))
	for _, d := range damaged {
		bad[d] = true
	}
	ret := events.OutputReturned{
		Hold:    stopped.Hold,
		Outcome: stopped.Outcome,
		Reason:  stopped.Reason,
		Files:   []events.OutputFile{},
		Missing: append([]string{}, stopped.Output.Missing...),
	}
	for _, f := range stopped.Output.Files {
		if bad[f.Path] {
			ret.Missing = append(ret.Missing, f.Path)
			continue
		}
		ret.Files = append(ret.Files, f)
		ret.Bytes += f.Bytes
	}
	switch stopped.Outcome {
	case events.LimitExceeded, events.OutOfMemory, events.Cancelled, events.NodeLost:
		// The job did not run to its end: what it had is returned, as partial.
		ret.Partial = true
	}
	if ret.Outcome == events.Succeeded {
		var problems []string
		if len(damaged) > 0 {
			problems = append(problems, "output failed verification: "+strings.Join(damaged, ", "))
		}
		if missing := requiredMissing(stopped); len(missing) > 0 {
			problems = append(problems, "required output missing: "+strings.Join(missing, ", "))
		}
		if len(problems) > 0 {
			ret.Outcome = events.Failed
			ret.Reason = strings.Join(problems, "; ")
		}
	}
	return []events.Event{ret}
}

// requiredMissing lists the declared outputs that are required and matched
// nothing. RunStopped lists every declaration that matched nothing; whether
// it was required comes from the spec RUN copied into Collected.
func requiredMissing(stopped events.RunStopped) []string {
	var out []string
	required := make(map[string]bool)
	for _, d := range stopped.Output.Declared {
		required[d.Path] = d.Required
	}
	for _, m := range stopped.Output.Missing {
		if req, known := required[m]; req || !known {
			out = append(out, m)
		}
	}
	return out
}
