package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"go.opentelemetry.io/otel/codes"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/trace"
)

// permanentError marks a failure that no retry can fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that retrying cannot fix (a malformed event, a
// bug): the message is moved to the poison stream with the reason instead of
// being redelivered for ever.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err, or a panic it stands for, cannot be fixed
// by retrying.
func IsPermanent(err error) bool {
	var p permanentError
	var panicked middleware.RecoveredPanicError
	return errors.As(err, &p) || errors.As(err, &panicked)
}

// HandlerFunc handles one event. It is called again for the same event after
// any failure or crash, so it must be idempotent; it may be called
// concurrently for different jobs, and for one job only as the Subscriber's
// lanes allow.
type HandlerFunc func(ctx context.Context, env events.Envelope) error

// Undecodable is told about a message that is not a valid event: its
// subject, stream sequence and what is wrong. It returns nil once it has
// dealt with it; an error it returns is handled like a handler's.
type Undecodable func(ctx context.Context, subject string, seq uint64, problem error) error

// Handle adapts fn to a watermill handler. An event of a type this version
// does not know is skipped. A message that is not a valid event goes to
// bad, or, with bad nil, is poison.
func Handle(fn HandlerFunc, bad Undecodable) message.NoPublishHandlerFunc {
	return handle("", fn, bad)
}

// handle is Handle, each event handled in a span of service's, a child of
// the event's trace context: what fn appends carries that span on. With
// service "", fn is given no span (the event's context is env.Trace).
func handle(service string, fn HandlerFunc, bad Undecodable) message.NoPublishHandlerFunc {
	return func(m *message.Message) error {
		env, err := Envelope(m)
		if events.IsUnknownType(err) {
			return nil
		}
		if err != nil {
			if bad != nil {
				seq, _ := strconv.ParseUint(m.Metadata.Get(MetaSeq), 10, 64)
				return bad(m.Context(), m.Metadata.Get(MetaSubject), seq, err)
			}
			return Permanent(err)
		}
		if service == "" {
			return fn(m.Context(), env)
		}
		ctx, span := trace.Start(m.Context(), service, env)
		err = fn(ctx, env)
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
		return err
	}
}

// RouterConfig configures the Router every service runs.
type RouterConfig struct {
	// Service names the service: poison goes to e31.poison.<Service>.
	Service string
	Logger  *slog.Logger
	// Publisher moves poison messages to the poison stream.
	Publisher *Publisher
	// Retries is how often a failed handler is retried in place before the
	// message is handed back to the server for delayed redelivery.
	Retries int
	// CloseTimeout bounds how long Close waits for running handlers.
	CloseTimeout time.Duration
	// Observer, if set, is told of every handling and every message set
	// aside: the service's metrics.
	Observer Observer
}

// Observer is told how a service's handlers fare, for the operator's
// metrics; pkg/metrics implements it, so that the bus does not import
// Prometheus. Its methods are called concurrently from every handler, on
// the handling's path: they must be quick and must not block.
type Observer interface {
	// Handled: handler took took over one attempt at one message and
	// returned err (nil on success). A retried message is one call per try.
	Handled(service, handler string, took time.Duration, err error)
	// Poisoned: a message was moved to e31.poison.<service>.
	Poisoned(service string)
	// Consuming: handler reads the consumer named consumer of stream (it
	// may not exist yet: the subscription makes it), from now on in
	// place of any it read before.
	Consuming(service, handler, stream, consumer string)
}

type observerKey struct{}

// WithObserver returns ctx carrying o, for Run to give every Router it
// makes: the process that starts the services decides what watches them,
// without each service's configuration having to carry it.
func WithObserver(ctx context.Context, o Observer) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

// ObserverFrom returns the Observer ctx carries, or nil.
func ObserverFrom(ctx context.Context) Observer {
	o, _ := ctx.Value(observerKey{}).(Observer)
	return o
}

// NewRouter returns a watermill Router with e31's middleware: failures are
// logged with the job id, retried a few times in place, then redelivered by
// the server with a delay; poison (malformed events, panics) goes to the
// poison stream with the reason, logged at Error, and the stream moves on.
func NewRouter(cfg RouterConfig) (*message.Router, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Retries == 0 {
		cfg.Retries = 3
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = 30 * time.Second
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.CloseTimeout}, watermill.NewSlogLoggerWithLevelMapping(cfg.Logger, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug}))
	if err != nil {
		return nil, fmt.Errorf("bus: router for %s: %w", cfg.Service, err)
	}
	if cfg.Publisher == nil {
		return nil, fmt.Errorf("bus: router for %s: a Publisher is required, for the poison stream", cfg.Service)
	}
	r.AddMiddleware(
		poisonQueue(cfg.Publisher, cfg.Service, cfg.Logger, cfg.Observer),
		logFailures(cfg.Logger),
		middleware.Retry{
			MaxRetries:      cfg.Retries,
			InitialInterval: 20 * time.Millisecond,
			MaxInterval:     500 * time.Millisecond,
			Multiplier:      3,
			ShouldRetry:     func(p middleware.RetryParams) bool { return !IsPermanent(p.Err) },
		}.Middleware,
		// Inside Retry, so that each try is one handling; outside
		// Recoverer, so that a panic counts as the failure it is.
		observe(cfg.Service, cfg.Observer),
		middleware.Recoverer,
	)
	return r, nil
}

// Counters of what this process's handlers set aside, for /metrics.
var poisoned, undecodable atomic.Uint64

// Poisoned is how many messages this process's handlers have moved to the
// poison stream: malformed events, events whose type does not belong on
// their subject, handlers that panicked or gave up for good.
func Poisoned() uint64 { return poisoned.Load() }

// SetAside is how many of the Poisoned messages were not valid events at
// all, or not where their type belongs. Any tenant may publish junk on its
// own tail of any job's subjects: this counts it, and the job it names goes
// on without it.
func SetAside() uint64 { return undecodable.Load() }

// poisonQueue moves a message whose handler failed for good to the poison
// stream, with the reason, logs it at Error, counts it and lets the stream
// move on: nothing that can never be handled may hold up what comes after
// it. A failure to move it is returned, so the message is tried again.
func poisonQueue(pub *Publisher, service string, log *slog.Logger, obs Observer) message.HandlerMiddleware {
	topic := events.PoisonSubject(service)
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(m *message.Message) ([]*message.Message, error) {
			out, err := h(m)
			if err == nil || !IsPermanent(err) {
				return out, err
			}
			// One poison message per stored message: its id is where it was
			// stored, never anything its publisher chose.
			seq := m.Metadata.Get(MetaSeq)
			pm := message.NewMessage(events.Stream+"-"+seq, m.Payload)
			for k, v := range m.Metadata {
				// Whatever its publisher told the server about the
				// original (an expected stream, a TTL, a rollup) must not
				// decide whether the copy is kept.
				if !strings.HasPrefix(strings.ToLower(k), "nats-") {
					pm.Metadata.Set(k, v)
				}
			}
			pm.Metadata.Set(middleware.ReasonForPoisonedKey, err.Error())
			pm.Metadata.Set(middleware.PoisonedTopicKey, message.SubscribeTopicFromCtx(m.Context()))
			pm.Metadata.Set(middleware.PoisonedHandlerKey, message.HandlerNameFromCtx(m.Context()))
			if perr := pub.Publish(topic, pm); perr != nil {
				log.Error("moving a message to the poison stream failed; it is tried again",
					"job", JobKey(m.Metadata.Get(MetaSubject)), "seq", seq, "err", errors.Join(err, perr))
				return nil, fmt.Errorf("move to the poison stream: %w", perr)
			}
			poisoned.Add(1)
			if obs != nil {
				obs.Poisoned(service)
			}
			var bad *events.DecodeError
			if errors.As(err, &bad) {
				undecodable.Add(1)
			}
			log.Error("message set aside in the poison stream",
				"job", JobKey(m.Metadata.Get(MetaSubject)),
				"subject", m.Metadata.Get(MetaSubject),
				"seq", seq,
				"handler", message.HandlerNameFromCtx(m.Context()),
				"poison", topic,
				"err", err)
			return nil, nil
		}
	}
}

// logFailures logs every failure that will be tried again, once, with the
// job and event it was about.
func logFailures(log *slog.Logger) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(m *message.Message) ([]*message.Message, error) {
			out, err := h(m)
			// A permanent failure is logged, at Error, as it is set aside.
			if err != nil && !IsPermanent(err) {
				log.Warn("handler failed",
					"job", JobKey(m.Metadata.Get(MetaSubject)),
					"event", m.UUID,
					"seq", m.Metadata.Get(MetaSeq),
					"handler", message.HandlerNameFromCtx(m.Context()),
					"err", err)
			}
			return out, err
		}
	}
}

// observe tells obs how long each handling took and how it ended.
func observe(service string, obs Observer) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		if obs == nil {
			return h
		}
		return func(m *message.Message) ([]*message.Message, error) {
			began := time.Now()
			out, err := h(m)
			obs.Handled(service, message.HandlerNameFromCtx(m.Context()), time.Since(began), err)
			return out, err
		}
	}
}
