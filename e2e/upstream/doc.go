// Package upstream is a system outside e31 that submits jobs to it: it
// knows e31 only by its published contract, the JSON Schemas and README in
// pkg/events/schema, and talks to it with a plain NATS client. It imports
// nothing from e31, and its module has no way to: its go.mod names no e31
// module.
package upstream
