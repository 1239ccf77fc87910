// Package release is the RELEASE step: it gives a job's compute back to the
// pool once its output is returned, and records ComputeReleased, which stops
// the meter. It also says whether the job is over: an attempt lost with its
// node is not the job's fault, so such a job is held again, up to
// events.MaxAttempts attempts that count (a lost attempt that saved a new
// checkpoint does not: events.CountedAttempts) and events.AttemptsCap in
// all.
package release

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// Config configures the service. It is the one way the service is built,
// by its own main, `e31 serve release` and `e31 dev` alike: the zero value is a
// working service, and New fills in the defaults of the fields left zero.
type Config struct {
	// Source is the CloudEvents source it stamps, e.g. "e31/release/host-1";
	// default events.DefaultSource.
	Source string
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service is the RELEASE step. Any number may run: they share one durable
// consumer.
type Service struct {
	js  jetstream.JetStream
	pub *bus.Publisher
	log *slog.Logger
}

// New returns a Service on js.
func New(js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Source == "" {
		cfg.Source = events.DefaultSource("release")
	}
	return &Service{js: js, pub: bus.NewPublisher(js, cfg.Source, cfg.Now), log: cfg.Logger.With("service", "release")}, nil
}

// Run handles events until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Setup(ctx, s.js, events.StreamOptions{}); err != nil {
		return err
	}
	topic := events.KindSubject(events.TypeOutputReturned) + " " + events.KindSubject(events.TypeHoldLost) +
		" " + events.KindSubject(events.TypeHoldExpired)
	return bus.Run(ctx, s.js, s.pub, "release", s.log, bus.Handler{
		Name:       "release",
		Topic:      topic,
		Subscriber: bus.SubscriberConfig{Durable: "release", Lanes: 16},
		Handle:     s.Handle,
	})
}

// Handle releases the compute of an attempt whose output was returned,
// whose node was lost, or that RENT ended at its limit plus grace because
// its node had not reported (limit_exceeded, for good: the node, not the
// job, kept quiet, but the job had its limit's worth).
func (s *Service) Handle(ctx context.Context, env events.Envelope) error {
	var hold events.Hold
	var outcome events.Outcome
	switch e := env.Event.(type) {
	case *events.OutputReturned:
		hold, outcome = e.Hold, e.Outcome
	case *events.HoldLost:
		hold, outcome = e.Hold, events.NodeLost
	case *events.HoldExpired:
		hold, outcome = e.Hold, events.LimitExceeded
	default:
		return nil
	}
	counted := hold.Attempt
	if outcome == events.NodeLost {
		history, err := bus.ReadJob(ctx, s.js, env.Subject, 1)
		if err != nil {
			return fmt.Errorf("release %s attempt %d: %w", env.Subject, hold.Attempt, err)
		}
		counted = events.CountedAttempts(history)
	}
	stored, err := s.pub.React(ctx, env, func(after []events.Envelope) ([]events.Event, error) {
		return DecideCounted(hold, outcome, after, counted), nil
	})
	if err != nil {
		return fmt.Errorf("release %s attempt %d: %w", env.Subject, hold.Attempt, err)
	}
	for _, e := range stored {
		s.log.Info("compute released", "job", env.Subject, "node", hold.Node, "attempt", hold.Attempt, "outcome", outcome, "seq", e.Seq)
	}
	return nil
}

// Decide is what RELEASE appends for an attempt that ended with outcome,
// given what happened to the job since: nothing if this attempt was
// already released. A job whose node was lost is held again, up to
// events.MaxAttempts: it was not the job's fault.
func Decide(hold events.Hold, outcome events.Outcome, after []events.Envelope) []events.Event {
	return DecideCounted(hold, outcome, after, hold.Attempt)
}

// DecideCounted is Decide for a job of which counted attempts count
// towards events.MaxAttempts (events.CountedAttempts): a lost attempt that
// saved a new checkpoint moved the job on and is not counted, but no job
// is held more than events.AttemptsCap times.
func DecideCounted(hold events.Hold, outcome events.Outcome, after []events.Envelope, counted int) []events.Event {
	for _, e := range after {
		if rel, ok := e.Event.(*events.ComputeReleased); ok && rel.Attempt == hold.Attempt {
			return nil
		}
	}
	final := !(outcome == events.NodeLost && counted < events.MaxAttempts && hold.Attempt < events.AttemptsCap)
	return []events.Event{&events.ComputeReleased{Hold: hold, Outcome: outcome, Final: final}}
}
