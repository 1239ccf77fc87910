// Package audit rebuilds every hold record from the raw event log, checks
// that the log is whole and unaltered, and compares the rebuilt records with
// the ledger's.
//
// It shares nothing with the ledger's projection but the event types
// (pkg/events), the record's shape (pkg/hold) and the log's direct reads
// (bus.Stored, not the consumer the ledger follows with): it reads raw
// stored messages exactly as stored, computes event digests and the hash
// chain with code of its own from the written definition (pkg/chain/SPEC.md,
// checked against its golden vectors like the ledger's),
// groups messages by job, and derives each record from the job's whole
// history at once, where the ledger folds events one by one as they come.
// Two independent derivations that agree field by field are the evidence
// that the records follow from the log.
//
// # What the audit checks
//
//   - The log is whole: stream sequences run from 1 without a gap; none
//     appears twice; none comes out of order.
//   - Every message decodes, its ce-id is the deterministic id of what it
//     says (and Nats-Msg-Id, when present, the same), and no event of e31's
//     services is stored twice. A client's request (JobRequested,
//     CancelRequested, DeleteRequested) may be repeated: asking twice is no
//     fault, and the repeat changes nothing.
//   - Each job's events follow the life of pkg/events: requested, submitted,
//     then for each attempt held, [started], stopped or lost, returned (not
//     after a lost hold), released; attempts numbered from 1 without a gap,
//     held only while the job waits; rejected or cancelled only while no
//     attempt is held, and cancelled only after a cancel was requested;
//     after the end, only a cancel request or what events.AfterEnd allows.
//   - Every event of an attempt names the node and resources of its hold.
//   - No compute is still held for a job that is over, and no attempt is
//     released before it was held.
//   - No node is ever held beyond what it announced, in cpu, memory, gpu or
//     disk, at any point of the log, nor held while it is expired. The log's
//     order is the instant: it is the one order every service saw, where
//     ce-times come from several clocks.
//   - With heads to check (the ledger's, and any given with --since-head),
//     the chain recomputed from the first message passes through each.
//
// Each finding names the job (where there is one), the stream sequence and
// what is wrong.
package audit
