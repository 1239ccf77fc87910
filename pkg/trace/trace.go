package trace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/e31net/e31/pkg/events"
)

// Name is the instrumentation scope of every e31 span.
const Name = "github.com/e31net/e31"

// Attribute keys of e31's spans: no span about a job goes without its id.
const (
	KeyJob     = attribute.Key("e31.job")
	KeyAttempt = attribute.Key("e31.attempt")
	KeyNode    = attribute.Key("e31.node")
	KeyEvent   = attribute.Key("e31.event")
	KeyService = attribute.Key("e31.service")
)

// Config says where spans go; it is read from the standard OpenTelemetry
// environment by ConfigFromEnv and by nothing else.
type Config struct {
	// Endpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT; empty: no export, no cost.
	Endpoint string
	// Disabled is OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
	Disabled bool
}

// ConfigFromEnv reads the standard OpenTelemetry variables through getenv
// (os.Getenv).
func ConfigFromEnv(getenv func(string) string) Config {
	ep := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if ep == "" {
		ep = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	return Config{
		Endpoint: ep,
		Disabled: strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none",
	}
}

// Setup installs a tracer provider that exports to cfg.Endpoint over
// OTLP/HTTP, as the process named service, and returns what flushes and
// stops it: call it on shutdown, or the last spans are lost. With no
// endpoint it installs nothing and returns a no-op. The exporter itself
// reads the rest of the standard variables (headers, timeout, protocol
// path): Setup does not second-guess them.
func Setup(ctx context.Context, cfg Config, service string) (shutdown func(context.Context) error, err error) {
	if cfg.Endpoint == "" || cfg.Disabled {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("trace: OTLP exporter to %s: %w", cfg.Endpoint, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		// A conflicting schema URL in OTEL_RESOURCE_ATTRIBUTES: name the
		// service anyway.
		res = resource.NewSchemaless(semconv.ServiceName(service))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	t := tp.Tracer(Name)
	tracer.Store(&t)
	enabled.Store(true)
	return func(ctx context.Context) error {
		// Back to the no-op, so that a process, or a test, that sets up
		// again starts clean.
		enabled.Store(false)
		tracer.Store(nil)
		otel.SetTracerProvider(noop.NewTracerProvider())
		return errors.Join(tp.ForceFlush(ctx), tp.Shutdown(ctx))
	}, nil
}

// enabled is set once Setup installed an exporting provider: until then
// Start does not even ask the no-op tracer for a span.
var enabled atomic.Bool

// Enabled reports whether spans are exported, for callers that would build
// attributes only for a span.
func Enabled() bool { return enabled.Load() }

// tracer is e31's tracer from the provider Setup installed, kept so that
// no span asks the global registry for it again.
var tracer atomic.Pointer[oteltrace.Tracer]

// Tracer is e31's tracer from the global provider: the no-op one unless
// Setup installed an exporter.
func Tracer() oteltrace.Tracer {
	if t := tracer.Load(); t != nil {
		return *t
	}
	return otel.Tracer(Name)
}

// w3c is the W3C trace context propagator; e31 uses it directly rather
// than the global one, so the log's format never depends on a process's
// settings.
var w3c propagation.TraceContext

// carrier adapts events.Trace to the propagator.
type carrier struct{ t *events.Trace }

func (c carrier) Get(k string) string {
	switch k {
	case "traceparent":
		return c.t.Parent
	case "tracestate":
		return c.t.State
	}
	return ""
}

func (c carrier) Set(k, v string) {
	switch k {
	case "traceparent":
		c.t.Parent = v
	case "tracestate":
		c.t.State = v
	}
}

func (c carrier) Keys() []string { return []string{"traceparent", "tracestate"} }

// Context is ctx with t as its remote parent; ctx itself if t is empty or
// malformed.
func Context(ctx context.Context, t events.Trace) context.Context {
	if t.Parent == "" {
		return ctx
	}
	return w3c.Extract(ctx, carrier{&t})
}

// Of is the trace context of ctx's span, to stamp on an event it causes;
// empty when ctx has none.
func Of(ctx context.Context) events.Trace {
	var t events.Trace
	if oteltrace.SpanContextFromContext(ctx).IsValid() {
		w3c.Inject(ctx, carrier{&t})
	}
	return t
}

// FromEnvironment is ctx continuing the caller's trace from TRACEPARENT and
// TRACESTATE as getenv (os.Getenv) gives them, the environment carrier
// OpenTelemetry's specification describes for processes that start
// processes.
func FromEnvironment(ctx context.Context, getenv func(string) string) context.Context {
	return Context(ctx, events.Trace{Parent: getenv("TRACEPARENT"), State: getenv("TRACESTATE")})
}

// Start starts the span of service handling env, a child of the event's
// context, with the job, attempt and node as attributes.
func Start(ctx context.Context, service string, env events.Envelope) (context.Context, oteltrace.Span) {
	ctx = Context(ctx, env.Trace)
	if !enabled.Load() {
		// Nothing records: pass the event's context on as it came and
		// build no span and no attributes that nobody reads.
		return ctx, oteltrace.SpanFromContext(ctx)
	}
	return Tracer().Start(ctx, service+" "+events.Name(env.Type), oteltrace.WithSpanKind(oteltrace.SpanKindConsumer),
		oteltrace.WithAttributes(JobAttributes(env)...), oteltrace.WithAttributes(KeyService.String(service)))
}

// JobAttributes are the attributes that say which job, attempt and node an
// event is about.
func JobAttributes(env events.Envelope) []attribute.KeyValue {
	attrs := []attribute.KeyValue{KeyJob.String(env.Subject), KeyEvent.String(env.Type)}
	if h, ok := events.HoldOf(env.Event); ok {
		attrs = append(attrs, KeyAttempt.Int(h.Attempt), KeyNode.String(h.Node))
	}
	return attrs
}

// Child starts a span named name under ctx's span, for a part of a step
// worth seeing on its own (the sandbox's start, the output's upload). When
// nothing is exported it starts nothing and returns ctx and its span.
func Child(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, oteltrace.Span) {
	if !enabled.Load() {
		return ctx, oteltrace.SpanFromContext(ctx)
	}
	return Tracer().Start(ctx, name, oteltrace.WithAttributes(attrs...))
}

// End ends span, recording err as its status if there is one.
func End(span oteltrace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
