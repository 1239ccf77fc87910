// Package trace makes one OpenTelemetry trace of each job's whole life.
//
// The W3C trace context travels in the event log itself, as the
// CloudEvents distributed-tracing extension (the ce-traceparent and
// ce-tracestate headers, events.Trace): the log is the only thing every
// step shares, and a context that lived anywhere else would be lost at the
// first restart. Each step's handling of an event is a span whose parent is
// the event's context; what the step appends carries the context of that
// span on (pkg/bus does it when it appends, from the handler's context), so
// every event of a job, across all five steps and every attempt, belongs to
// the trace the submitting client started, or that it continued from its
// caller's TRACEPARENT.
//
// Spans are exported with the standard OTLP exporter when the standard
// environment (OTEL_EXPORTER_OTLP_ENDPOINT, or its _TRACES_ form) names an
// endpoint, and not at all otherwise: then the global tracer provider stays
// OpenTelemetry's no-op one, whose spans record nothing and cost a few
// allocations, while the events still pass on a context they were given.
package trace
