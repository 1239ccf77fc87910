// Package compromised plays a compromised run node against a running e31,
// to show that a node changes only its own jobs: not another node's jobs,
// leases or consumers, not the streams, not a tenant's data beyond the
// jobs held on it while they are, and nothing an auditor trusts.
//
// The tests start `e31 dev --users honest --nodes 1` as a separate
// process: one honest node, node-1, runs the jobs of the tenant "honest".
// The operator then issues credentials for a second node, "rogue" (`e31
// creds user --role node`), as it would for any machine joining the pool,
// and the rogue's host is taken to be broken into: the tests hold its
// credentials and a plain NATS client, and nothing else. The rogue joins
// the pool (it announces itself, keeps its lease, reads its holds through
// the node gate) as a node that runs only jobs that name an image and is
// too small for any other, so that honest's jobs run on node-1 and one
// "bait" job of honest's runs on the rogue.
//
// TestCompromisedNode runs the attacks in turn, one subtest each, while
// honest's job runs on node-1:
//
//   - stop: stops of honest's running job under the rogue's own name
//     (node_lost, failed with a day of cpu, its own bytes named as the
//     output), with the ids node-1's stop will have, and under node-1's name
//     and the subject starts and stops had before nodes were named there;
//   - start: a start of the job under its own name;
//   - lease: node-1's lease, the leader's, in both buckets;
//   - rollup and purge: "Nats-Rollup: all" on its own lease, and purges of
//     every bucket and of the log;
//   - data: honest's job's input, asked of the node gate and read from
//     honest's bucket directly; the bait's input, read while the rogue holds
//     it and again once it is released;
//   - streams: a mirror of the ledger's bucket, a stream capturing what
//     every job writes;
//   - consumers: OUTPUT's and node-1's consumers read, made, deleted, pulled
//     from; node-1's made by the gate for the rogue; a push consumer;
//   - replies: JetStream's answers (the API, the PubAcks of its lease and
//     its events) aimed at leases, honest's events and objects.
//
// After each attack (aftermath) honest's job ends as node-1 says, with its
// output intact; the leases are as they were; the log holds nothing the
// rogue could not write, and what it wrote is set aside in honest's record;
// `e31 audit` passes.
//
// Like e2e/hostile, the package knows e31 only by its published contract
// (the schemas' README and envelope.json, SECURITY.md, and the node gate's
// protocol, pkg/gate's documentation); it imports nothing of e31 and stays
// outside the go.work workspace (run it with GOWORK=off, as `make e2e`
// does).
package compromised
