// Package ledger is the LEDGER: it projects the event log into one hold
// record per job (DESIGN.md's public record) and answers queries about them.
//
// # What a record says
//
// A record lists every event of its job, each with the digest of the
// message as stored, and carries events_digest over them (pkg/chain,
// SPEC.md), so that anyone holding a record can tell whether a copy
// of the log still has the exact events it was built from. The meter is
// held time, from ComputeHeld's ce-time to ComputeReleased's, and
// resource-time, the resources held times that time (cpu-core-seconds,
// memory-GiB-seconds, gpu-seconds), per attempt and in total; the usage
// RUN measured sits beside it.
//
// # The hash chain
//
// The ledger keeps a running SHA-256 chain over every message of the stream,
// in stream order, including messages that are not events it can read: a
// message that nobody can decode must still not disappear unseen. Its head
// (`e31 ledger --head`) is what an auditor keeps outside the system: later,
// `e31 audit --since-head SEQ:HASH` proves that nothing at or before SEQ was
// changed, inserted or removed.
//
// The ledger does not write checkpoints of the chain into the log. A
// checkpoint in the same log, unsigned, proves nothing against whoever can
// rewrite the log: they rewrite the checkpoints too. Signed, it proves
// something only if the key is held by someone who cannot write the log,
// and the LEDGER runs with the same NATS rights and on the same machines as
// everything that writes it. The evidence is a head held by someone else:
// an auditor's notes, a ticket, a witness that fetches the head from time to
// time and signs it with a key of its own, somewhere else. The head query is
// the hook for such a witness; writing into the log would add nothing.
//
// # Rebuild
//
// The ledger keeps no state of its own: it rebuilds every record from the
// first message of the log on every start, reading raw messages through an
// ordered consumer, digesting and decoding them in parallel and folding
// them in stream order, then follows the log with the same consumer. It
// answers queries from the first moment, saying how far it has read
// (LedgerInfo.Behind); a query can ask it to wait until it has applied a
// given sequence, so that a client that saw an event reads a record that
// includes it.
//
// It does not start from a snapshot. A snapshot would have to be verified
// against the log before it could be trusted, and the only verification
// that is not trust in the snapshot's own claim is recomputing the chain up
// to its sequence: reading and digesting every message, which is most of
// what a rebuild costs (see `e31 bench ledger`). A second copy of the
// records on disk would also be a second source of truth to keep in step
// with the log, and one more thing for an auditor to doubt.
//
// Nor does it use a durable consumer: the records are rebuilt on every
// start, so there is nothing to acknowledge, and an ordered consumer
// delivers every message once, in order, without gaps, recreating itself
// where a delivery was lost, which a running hash needs. A redelivered or
// late message is recognized by its sequence and changes nothing.
package ledger
