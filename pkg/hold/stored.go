package hold

// Stored is what an auditor reads of an entry of the ledger's bucket
// (events.LedgerRecordPrefix): the job's record. The entry holds more, the
// ledger's own state for folding further events in, which is no one
// else's business; decoding into Stored skips it.
type Stored struct {
	Record *HoldRecord `json:"record"`
}

// Checkpoint is what an auditor reads of the ledger's checkpoint
// (events.LedgerCheckpointKey): the sequence of the log that the entries
// written with it, and those left as they were before it, are as of.
type Checkpoint struct {
	Applied uint64 `json:"applied"`
}
