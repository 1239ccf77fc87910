// Package bus connects e31's services to the event log: a watermill Publisher
// and Subscriber over nats.go's jetstream package, the Router every service
// runs its handlers on, and the two rules that give exactly-once effects on
// top of at-least-once delivery.
//
// # Why our own adapter
//
// watermill-nats v2.1.3 publishes to one stream per topic, makes consumers
// that vanish after five idle seconds, never sets Nats-Msg-Id and never tells
// the server that a long handler is still working. This adapter keeps
// watermill's Router and middleware (Recoverer, Retry, PoisonQueue) and gives
// them durable pull consumers with explicit acks, Nats-Msg-Id from the event
// id, in-progress signals for handlers that run as long as a job, and delayed
// redelivery on failure. It passes watermill's own Pub/Sub conformance suite.
//
// # Exactly-once effects
//
// Delivery is at least once. Two rules make every effect happen once:
//
//  1. Every event has a deterministic id (events.ID), sent as Nats-Msg-Id, so a
//     retried publish inside the duplicate window is stored once.
//  2. A step that reacts to a job's event appends its own event only if the
//     trigger is still the job's last event (React uses JetStream's expected
//     last sequence for the job's subjects). If something happened since, the
//     step reads what happened and decides again: a redelivered trigger whose
//     effect is already in the log changes nothing, whenever it arrives.
//
// # What a tenant can publish
//
// Any submitter may publish on its own tail of any job's subjects
// (…requested.<me>, …cancel.<me>, …delete.<me>), so the log holds what
// nobody checked: junk, events of types that do not belong where they are,
// forged Nats-Msg-Ids, empty messages with a Status header. Nothing of it
// may stop a job or a reader:
//
//   - A job's history is read with batched direct gets (ReadHistory,
//     StoredJob), which create nothing on the server, and ends at the true
//     last message of the job's subjects, junk included: that is what React
//     expects, so junk never makes an append conflict for ever. The server
//     is asked for exactly as many messages as the job has, so that it never
//     looks past the job's last one to the end of the log, and a job whose
//     messages lie far apart is read subject by subject by the server's
//     index (StoredJob says how): what a read costs does not grow with the
//     log; a tenant's junk costs its own job's reads.
//   - An append the server takes for a duplicate is checked: a forged
//     Nats-Msg-Id on a tenant's subject does not keep the event out.
//   - The Subscriber pulls with plain pull requests (see Pull) and tells
//     a stored message from the server's statuses by its $JS.ACK reply:
//     nats.go's consumers take an empty message with a Status header for a
//     status and never hand it over. A message that is not a valid event is
//     moved to the poison stream, logged at Error and counted (Poisoned,
//     SetAside); the job it names goes on.
//   - A durable consumer deleted under a running Subscriber is made again
//     from the first message it had not settled; if it cannot be, Run ends
//     with the error.
//
// # Following the log
//
// A projection (RENT's pool, the LEDGER's records, OUTPUT's retention, the
// metrics) follows the log with a Tail: it reads every message in order
// from where the projection is (a Follower: an ephemeral consumer pulled
// like the Subscriber's, made again where the reading is when it is lost),
// hands them to the projection's Apply in batches, and says how far the
// projection is: Applied, WaitFor, Changed for a waiter with a deadline of
// its own, and CaughtUp once the log as it was at the start is applied.
// Reading a job's history, or the log up to now, creates nothing on the
// server: ReadHistory, Replay and Stored use direct gets.
//
// # Ordering
//
// A Subscriber with Lanes > 0 hands messages with the same key (the job id)
// to the Router one at a time, in stream order; Lanes == 1 keeps the whole
// stream in order, which the projections (RENT, LEDGER) need. Lanes == 0
// hands every message over at once, for handlers that run as long as a job.
package bus
