// Package hostile plays a hostile tenant against a running e31, to show
// that one tenant cannot change what another gets: its jobs, its output, the
// log an auditor trusts, or how fast it is answered.
//
// The tests start `e31 dev --users mallory,honest` as a separate process and
// then act as two submitters. The honest one, "honest", runs jobs with the
// e31 CLI, as a person would (`e31 submit --wait`, `e31 output`). The
// hostile one, "mallory", holds nothing but an ordinary submitter's
// credentials and a plain NATS client, and does everything those let it do:
// it names other subjects as the reply subject of its queries, publishes
// junk, oversized bodies and forged events on the subjects it may publish,
// floods the query endpoints with long polls, runs past its quotas and asks
// for an image it was not allowed. A third connection, the operator's,
// watches every subject during an attack and reads the log afterwards, so a
// test can say exactly what leaked where.
//
// TestHostileTenant runs the attacks in turn, one subtest each, on one
// system, so that what one attack leaves behind shows in the next:
//
//   - replies (replies_test.go): every query endpoint asked with the reply
//     subject of a lease, an object of honest's bucket, every event subject
//     of honest's running job, the JetStream API and honest's inbox;
//   - garbage (garbage_test.go): junk, bodies at and over the bounds,
//     wrong types, events of types mallory does not own and forged
//     by/submitter fields, on every tail mallory may publish, of its own
//     jobs and honest's;
//   - msgids: events stored ahead of their owners under the ids the
//     owners will give them, so that the real ones look like repeats;
//   - flood (flood_test.go): 50 long polls and a burst of questions, while
//     honest's queries are timed (p99 logged);
//   - snooping: what mallory's answers tell of honest;
//   - image and quotas (policy_test.go): an image nobody allowed, and
//     max-data, max-queued and max-rate set by the operator and exceeded.
//
// After each attack the same things must hold (aftermath): honest's jobs
// succeed with their output intact, nothing is in the log that mallory
// could not have written, the event log has no more consumers than at
// rest, and `e31 audit` passes. A failure names the attack and what it
// changed; waits are bounded, so a frozen job is reported as such, with
// its events, rather than as a timeout of the whole test.
//
// Like e2e/upstream, the package knows e31 only by its published contract:
// the JSON Schemas and README in pkg/events/schema, README.md and
// SECURITY.md. It imports nothing from e31, and its module has no way to:
// its go.mod names no e31 module, and it stays outside the go.work
// workspace (run it with GOWORK=off, as `make e2e` does).
package hostile
