// Package stack is a whole e31 in one process: an embedded NATS JetStream
// server with authentication on, every service (SUBMIT, RENT, OUTPUT,
// RELEASE, LEDGER) and N compute nodes (RUN), each connected as itself with
// its own credentials, so that a service reaching beyond its role fails here
// as it would in a deployment.
//
// It is what `e31 dev` runs, what the benchmarks measure and what the
// system tests start. It is also the only place that knows every service:
// NewService builds one by name from its Config, the same Config its own
// main reads its flags into, so that `e31 serve NAME`, `e31 dev` and the
// service's own binary build it alike, with the same defaults. RunAlone
// runs one of them by itself against an external NATS, with its operator's
// endpoints, as `e31 serve NAME` does; Provision, RaiseReplicas and
// OpenDataBucket make on a NATS cluster what a Stack makes for itself
// (`e31 setup`).
//
// A Stack keeps its state in one directory: the NATS store (DIR/nats), the
// keys that sign every credential (DIR/keys, made on first start; keep them
// private), the credentials it writes for the operator, the auditor and each
// submitter (DIR/creds) and the nodes' work directories (DIR/nodes/NODE).
// Starting it again on the same directory keeps every job and record.
package stack
