// Package output is the OUTPUT step, and the owner of the data store.
//
// RUN collects what a job left under /out into the store as it stops;
// OUTPUT checks that every collected file is stored intact, decides the
// attempt's final outcome (a job that exited 0 without a required output
// did not succeed; one that did not finish returns what it had, marked
// partial) and records OutputReturned, naming the manifest of the files
// returned: an event lists only the first of them.
//
// OUTPUT also keeps what jobs stored only as long as they may use it: a
// job's staged data, output and logs live until its retention passes after
// its end, or until its submitter deletes them. That is package retention
// (services/output/retention), which OUTPUT runs beside its own handler:
// it shares OUTPUT's ownership of the store, its Deleted events and its
// poison stream, and has a decision and a projection of its own. It is a
// package rather than a seventh service because it deletes from the store
// OUTPUT writes to, with the same credentials, and because a deployment
// that runs OUTPUT must never forget to run it.
package output
