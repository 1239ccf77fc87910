// Package client is a typed Go client of e31: what the e31 command line
// does, for programs. It connects to the NATS server of an e31 system as
// one identity (the credentials say which, or `e31 dev`'s for this
// machine's user), and then submits jobs, follows them, fetches their
// output and logs, cancels them, and reads the ledger and the log.
//
// # How it talks to e31
//
// A client writes to the event log only what a user may ask for: a job's
// request (JobRequested), a cancel and a deletion. Everything else it asks
// of the services that read the log: the ledger answers for records,
// totals and a job's events, the scheduler says why a job waits, OUTPUT
// says what jobs keep in the store. Those answers need no access to the
// log itself, so a submitter, who sees only its own jobs, uses them all.
// Reading the whole log (Scan, Follow, Audit) is for the auditor and the
// operator.
//
// Answers are as of now: a request carries the log's last sequence (or
// asks the service to read it), so what a client wrote a moment before is
// in what it reads back. A service that is busy (at a limit) is asked
// again with backoff; one that is still catching up with the log after a
// start answers with what it has where the method says so (Behind).
//
// Data is staged content addressed in the submitter's data store before
// the request is written: data already stored is not sent again, and a
// job refers to its data by digest. Output is written to a folder with
// every file checked against its digest.
//
// # Errors
//
// Errors wrap one of the Err… values where it applies (ErrNoSuchJob,
// ErrNotPermitted, ErrInvalid, …), to be checked with errors.Is; an error
// that wraps none is trouble reaching e31 or getting an answer in time.
//
// # Concurrency
//
// A Client's methods may be called from several goroutines at once. Close
// ends the connection, and with it every call under way.
package client
