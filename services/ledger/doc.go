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
// # Records out of memory, and a checkpoint
//
// The ledger keeps in memory only the jobs still open and those changed
// since its last flush. At least every second (and whenever a few hundred
// jobs have changed) it flushes: it writes every changed job's entry (its
// record, the ce-ids and the running digest behind it) to its own KV
// bucket, events.LedgerBucket, with the index of records in the order they
// were made (what listings page through), the list of open jobs, and a
// checkpoint: the log's sequence all of it is as of, the hash chain there,
// the counts, and the running sums of the totals of every job that is not
// open. Then it forgets the jobs that are over. A query about one of them
// reads the bucket; a list pages through the index; totals without a
// period add the running sums to the open jobs; totals of a period read
// every record.
//
// A flush is one JetStream atomic batch, the checkpoint last: the server
// stores all of it or none (a batch cut by a crash is dropped, or completed
// when the server restarts). So the records and the checkpoint never
// disagree, and on start the ledger loads the checkpoint and the open jobs,
// reads the log from the message after the checkpoint and folds it in
// exactly as the first time: nothing it folds was in the bucket already.
// A start folds in what was logged since the last flush, not the whole log
// (Service.Started says how much). With an empty bucket (a new one, or
// purged on purpose) it folds the whole log in from the first message.
//
// Several instances share the bucket, each folding the log at its own
// pace, so each builds on one checkpoint, the one it started from or last
// wrote, and writes only over it: its checkpoint message carries
// Nats-Expected-Last-Subject-Sequence, and the server refuses the whole
// batch if another instance wrote a checkpoint since. A key read with a
// revision past that checkpoint was likewise written by another instance.
// Either way the instance drops what it holds and starts again from the
// bucket's checkpoint, newer or older than where it was (store.go). A
// lagging instance never writes records older than the checkpoint beside
// them, nor folds events into a record that already holds them.
//
// The bucket is the ledger's own, made by `e31 setup` with the streams,
// written in atomic batches and read by its credentials alone (pkg/auth):
// a submitter cannot read others' records there. It is derived from the
// log and is not a second source of truth. The audit never reads it:
// pkg/audit rebuilds every record from the log's first message and
// compares them with the records the ledger serves, so a bucket that was
// tampered with (by whoever may write it: the operator) shows up as
// records that do not match, and a chain head the ledger continued from a
// false checkpoint does not match the head the audit computes. That is the
// same trust an auditor placed in a ledger that rebuilt everything: the
// evidence is the log and a head held by someone else, not the ledger.
//
// The ledger follows the log with an ordered consumer, not a durable one:
// where to go on from is the checkpoint's, stored with what it derived,
// and an ordered consumer delivers every message once, in order, without
// gaps, recreating itself where a delivery was lost, which a running hash
// needs. A redelivered or late message is recognized by its sequence and
// changes nothing.
package ledger
