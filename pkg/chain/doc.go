// Package chain is the written definition of the event digest and of the
// hash chain over e31's log (SPEC.md beside this file, version
// e31.event.v1), with golden vectors in testdata, and the chain head as
// the ledger shows it and the audit reads it (Head). It holds no digest
// implementation on purpose: the ledger and the audit each implement the
// definition apart (services/ledger/digest.go, pkg/audit/digest.go), and
// both are tested against the same vectors, which were computed from the
// text alone. Two implementations that agree with a third are evidence; one
// shared function would only agree with itself.
package chain
