// Package bench measures e31 on this machine: the whole life of a job
// through a whole e31 in one process (Life, over package stack), staging
// and output through the data store (Stage), the scheduler with a deep
// queue (Scheduler), and the audit's replay and the ledger's rebuild over a
// long log (Ledger). `e31 bench` and its subcommands are flags over it.
//
// Each writes its figures to an io.Writer as it goes, and ends with one
// machine-readable summary line whose format is a contract: scripts and CI
// read it ("bench jobs=… jobs_per_s=… floor_per_s=… ratio=…",
// "bench-ledger events=…", the JSON line of Stage, …). Add fields at the
// end; never rename or reorder one.
package bench

import "errors"

// ErrFailed is wrapped by the error of a measure whose run went wrong in a
// way the figures must not hide: a job that did not succeed, a log the
// audit found wrong, a ledger that disagrees with the audit. The summary is
// written before.
var ErrFailed = errors.New("bench: failed")

// ErrNATS wraps the errors of starting or reaching the embedded NATS server.
var ErrNATS = errors.New("bench: NATS")

// ErrUsage wraps the errors of options that cannot be measured.
var ErrUsage = errors.New("bench: options")
