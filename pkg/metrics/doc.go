// Package metrics derives what an operator watches from the event log, and
// exposes it in Prometheus' terms.
//
// The figures about jobs, the meter and the pool are not counted by the
// services as they work: they are a projection of the E31 stream, like the
// ledger's hold records, so that they say what the log says and agree with
// `e31 ledger` (a test compares them). Any process that can read the log can
// serve them, and a restarted one arrives at the same figures by replaying
// the log from its first event.
//
// The projection (Projection.Apply) is a pure fold of one event into the
// figures, tested on tables of events; LogCollector follows the stream with
// an ordered consumer, feeds the fold and hands the figures to Prometheus at
// each scrape as constant metrics, the way kube-state-metrics does. Memory
// is bounded by the live jobs and the nodes: a job is forgotten once it is
// over (rejected, cancelled or finally released), and only counters remain.
//
// # Metrics
//
// Jobs (no job id in any label: a label per job would grow without bound):
//
//   - e31_jobs{state}: jobs in each state as `e31 status` names them
//     (submitted, waiting, held, running, stopped, returned, released,
//     rejected, cancelled). The last three are over: they count every job
//     that ended so.
//   - e31_jobs_finished_total{outcome}: jobs over, by final outcome (the hold
//     record's outcome).
//   - e31_job_wait_seconds: histogram, from the job's submission (or the
//     release of a lost attempt) to its hold, by ce-time.
//   - e31_job_start_seconds: histogram, from the hold to the node's start.
//   - e31_job_release_seconds: histogram, from the attempt's stop (or the
//     loss of its node) to its release.
//
// The meter, per submitter, counted when an attempt is released (as the
// ledger bills it, so the figures agree with `e31 ledger --totals`):
//
//   - e31_held_seconds_total{submitter}
//   - e31_held_cpu_core_seconds_total{submitter}
//   - e31_held_memory_gib_seconds_total{submitter}
//   - e31_held_gpu_seconds_total{submitter}
//
// The pool:
//
//   - e31_node_capacity{node,resource,unit}: what each node in the pool
//     announced (resource cpu/core, memory/byte, gpu/gpu, disk/byte).
//   - e31_node_held{node,resource,unit}: what is held on it now.
//   - e31_nodes{state,isolation}: nodes up and lost, by the isolation they
//     announced ("unknown" for nodes older than the field).
//   - e31_hold_max_overrun_seconds: the longest any open hold has outlived
//     its job's limit (0 when none has): a hold that should be over and is
//     still metered.
//
// The log:
//
//   - e31_events_total{type}: events read, by ce-type; "unknown" for types
//     this version does not know, "undecodable" for messages that are
//     not valid events and "set_aside" for a node's start or stop of an
//     attempt held on another node, so that nobody who can publish grows
//     the label set.
//   - e31_log_applied_sequence: the last stream sequence folded in.
//
// The bus, asked of the NATS server at each scrape by StreamCollector
// (which needs the operator's permission to list consumers):
//
//   - e31_consumer_pending{service,consumer}: events not yet delivered to
//     each durable consumer of the log: the lag an operator scales on.
//   - e31_consumer_ack_pending{service,consumer}: delivered, not yet
//     acknowledged.
//   - e31_poison_messages{service}: events a service could never handle,
//     in the poison stream (kept 30 days).
//
// Each service's own durable consumers, asked of the server by the service
// itself with its own credentials (ConsumerCollector, the figures
// StreamCollector gives for all of them in e31 dev); instances of one
// service report the same consumer, aggregate with max.
//
// What only the services know, told as they work (Handlers is the
// bus.Observer every service process gives its Routers; Scheduler is
// RENT's rent.Observer):
//
//   - e31_handler_seconds{service,handler}: histogram of each handling.
//   - e31_handler_errors_total{service,reason}: transient, permanent or
//     timeout.
//   - e31_poison_total{service}: events moved to the poison stream.
//   - e31_scheduler_decision_seconds, e31_scheduler_queue_depth{submitter},
//     e31_scheduler_leader.
//
// The audit, from `e31 audit --every D --http ADDR` (Audit):
//
//   - e31_audit_runs_total{result}: ok, findings or error.
//   - e31_audit_findings: what the last complete audit found (0: nothing).
//   - e31_audit_last_completed_timestamp_seconds.
package metrics
