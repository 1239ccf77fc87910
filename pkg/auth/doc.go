// Package auth is who may do what on e31's bus: the identities (submitters,
// services, the auditor, the operator), the NATS permissions of each role,
// and the keys and credentials that carry them.
//
// # The model: NATS decentralized JWT authentication
//
// An operator key signs three accounts, E31, TENANTS and NODES; each
// account's signing key signs one user per identity: the services, the
// auditor and the operator in E31, the submitters in TENANTS, the run
// nodes in NODES. A server trusts the
// operator and is given the accounts' JWTs (preloaded into its resolver);
// it never learns about users.
// A user presents its JWT and proves it holds the key named in it, and the
// server enforces the permissions the JWT carries.
//
// Why this model rather than users listed in each server's configuration:
// a new submitter, a new node or another service instance gets credentials
// from whoever holds the account signing key (`e31 creds user`), with no
// server reconfigured or restarted, which is what a network that people and
// nodes join all the time needs; every server of a cluster agrees on who
// may do what without sharing a user list; and revoking a user is one
// account JWT update, pushed to the servers while they run.
//
// # Accounts
//
// Everything tenants share (the event log, the leases, the buckets) lives
// in E31, and tenants are told apart there by subject permissions. But
// permissions bind clients, not the server: JetStream answers every
// request it receives (API answers, PubAcks of the log and of object
// chunks) on whatever reply subject the request names, from its own client
// inside the account. With submitters in E31, one naming a node's lease key
// or an event subject as its reply had JetStream write its answer there.
// So submitters live in TENANTS, which has no JetStream and reaches E31
// only through service imports of what E31 exports to it alone
// (tenantServices: its request, cancel and delete subjects, the queries,
// the object store subjects, the JetStream API). Through an import the
// server gives the request a one-time reply of its own (_R_.…) and takes
// every answer back to the reply the submitter named, inside TENANTS,
// where nothing stores it. A submitter's permissions are what they were:
// the imports carry only what they let through.
//
// Run nodes live in NODES for the same reason, and more: a node runs
// tenants' code and may belong to someone the submitters never met, so
// its credentials are the likeliest to leak. NODES has no JetStream and
// imports from E31 only what a node needs (nodeServices): its events and
// poison subject, its lease in the nodes' own bucket
// (events.NodeLeasesBucket, which refuses rollups and purges), the
// JetStream API (reading the log, pulling from its consumers), the acks of
// what it pulled, and the node gate (pkg/gate), through which it has its
// two consumers made and reads and writes the data of the jobs held on it,
// while they are. What its jobs write (events.LogSubjects) it publishes in
// NODES, which exports it to TENANTS and E31. A node may create, change,
// purge or delete no stream and no consumer: a consumer create's body may
// name a deliver subject, any subject of E31, and no permission can read a
// body.
//
// # Identity travels in subjects
//
// A user may publish only on subjects that name it: a submitter's requests
// on e31.job.<id>.requested.<name>, its cancels on e31.job.<id>.cancel.<name>,
// its queries on e31.api.<name>.…; a node's starts and stops on
// e31.job.<id>.started.<node> and …stopped.<node>, its announcement on
// e31.node.<node>.announced. So whoever reads the subject knows who
// sent it, vouched for by the server, never by a field the client filled
// in. Replies to a user go to its own inbox prefix (Identity.InboxPrefix),
// which no one else may subscribe to; the services answer with response
// permissions (allowed to publish once to the reply subject of a request
// they received) instead of a right to publish on every inbox.
//
// # Roles
//
// Permissions is the one place that says what each role may do; its tests
// try every event type as every role on a real server. In short: a
// submitter publishes its own requests, cancels and queries, and reads and
// writes its own data bucket; a node publishes its own events and reaches
// the data of what it holds through the gate; each other service publishes
// only the event types its step owns (Owned) and reads what it consumes;
// the auditor reads the
// whole log and changes nothing; the operator may do everything.
package auth
