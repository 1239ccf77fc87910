// Package audit rebuilds every hold record from the raw event log, checks
// that the log is whole and unaltered, and compares the rebuilt records with
// the ledger's.
//
// It shares nothing with the ledger's projection but the event types
// (pkg/events), the record's shape (pkg/hold) and the reading of the log
// (pkg/bus: its direct reads, and bus.Pull, which the ledger's consumer
// pulls with too, while the audit checks by itself that what it read is the
// whole log, in order): it reads raw stored messages exactly as stored,
// computes event digests and the hash chain with code of its own from the
// written definition (pkg/chain/SPEC.md, checked against its golden vectors
// like the ledger's), groups messages by job, and derives each record from
// the job's whole history at once when the job is over, where the ledger
// folds events one by one as they come. Two independent derivations that
// agree field by field are the evidence that the records follow from the
// log.
//
// # Streaming
//
// The audit reads the log once, in order, at about the rate the log can be
// read at all: one goroutine pulls batches of stored messages (an
// ephemeral consumer, see readLog), a worker per
// core digests and decodes a batch at a time, and one folder takes the
// batches in the order they were read, whichever worker finished first.
// A job's history is held until the job ends (released for good, rejected
// or cancelled); then its record is derived and checked, and the history
// let go of. With Options.Forget the record goes too, and what remains of
// the job is a tomb of about 200 bytes (map entry and key included): how
// it ended, to judge what the log says of it afterwards (a cancel asked
// again, retention's deletions, which the record lists; anything else is
// a finding), and sums of its record to hold the ledger's against. An
// event of a job's life stored again after the job ended is found as an
// event after the end, not as a duplicate: the job's ids went with its
// history.
//
// # The ledger's records
//
// Auditor.Run reads the ledger's records where the ledger keeps them, its
// bucket (events.LedgerBucket, read by the auditor only), every entry
// once, decoded and summed on every core: not through the ledger's
// listing, whose serving cost more CPU than the whole audit may take. It
// reads them in step with the log, as the ledger wrote them, and lets go
// of each job's tomb as soon as the job's record is compared (merge.go):
// what the audit holds is then the jobs still open, and those that ended
// about a flush of the ledger ago or have retention's deletions still
// ahead in the log, not a tomb for every job that ever ended (157 MiB
// resident after 1,000,000 events and 118,000 jobs, 142 MiB after
// 300,000, where the tombs made it 377). A job let go of that the log
// names again (a deletion, a request repeated) has its history read again
// from the log. The records are as of the ledger's checkpoint, which the
// audit waits for to reach where it read the log before it settles what
// is left; see Auditor.Run for a ledger that is behind.
//
// # What the audit checks
//
//   - The log is whole: stream sequences run from 1 without a gap; none
//     appears twice; none comes out of order.
//   - Every message decodes, its ce-id is the deterministic id of what it
//     says (and Nats-Msg-Id, when present, the same), and no event of e31's
//     services is stored twice. A client's request (JobRequested,
//     CancelRequested, DeleteRequested) may be repeated: asking twice is no
//     fault, and the repeat changes nothing.
//   - Each job's events follow the life of pkg/events: requested, submitted,
//     then for each attempt held, [started], stopped or lost, returned (not
//     after a lost hold), released; attempts numbered from 1 without a gap,
//     held only while the job waits; rejected or cancelled only while no
//     attempt is held, and cancelled only after a cancel was requested (of
//     the job, or of its sweep, of the job's round or a later one, by
//     someone who may cancel it); after the end, only a cancel request or
//     what events.AfterEnd allows. A sweep's cancel is in no record.
//   - Every event of an attempt names the node and resources of its hold.
//     A node's start or stop (stored on a subject that ends with the node
//     that published it) counts only from the node the attempt was held on:
//     one from any other node, of an attempt never held, or after the
//     job's end, and garbage on a node's own subject, are listed (where
//     they decode), set aside and no finding, unless the ledger's record
//     counted one, which is a finding that names it. The audit tells the
//     sender by the subject; the ledger by the body, which the decoder
//     holds to the subject.
//   - Every checkpoint save (CheckpointSaved) falls inside its attempt's
//     run: after its RunStarted, before whatever ended it (its stop,
//     HoldLost, HoldExpired, its release), and not before its hold's
//     time. One outside is listed, set aside (as the ledger sets it
//     aside: a node cut off may send one late) and a finding. Every
//     resume (RunStarted's resumed_from) names a save of an earlier
//     attempt that counts; one that names none is a finding.
//   - No compute is still held for a job that is over, and no attempt is
//     released before it was held.
//   - No two attempts of one job overlap in time, by the stream's own
//     times (when the server stored each message, which no publisher
//     sets; in an export without them, each event's ce-time): an
//     attempt runs from its ComputeHeld to the first of its RunStopped
//     (its node stopped it) or HoldLost (RENT gave it up, with its node),
//     or with neither to its ComputeReleased; the next attempt's
//     ComputeHeld must not be earlier. The log's order already puts every
//     hold after the release before it; a finding means the times say
//     otherwise: a clock out of step by more than the gap, or a log
//     changed. A node cut off stops its own jobs before RENT may give
//     them up (pkg/lease), so its attempt ends, in fact as in the log,
//     before the next is held.
//   - No node is ever held beyond what it announced, in cpu, memory, gpu or
//     disk, at any point of the log, nor held while it is expired. The log's
//     order is the instant: it is the one order every service saw, where
//     ce-times come from several clocks.
//   - No GPU is ever held by two attempts at once (a device is held from
//     its attempt's ComputeHeld to its ComputeReleased, in the log's
//     order), nor held on a node whose announcement in force did not list
//     it.
//   - Every stop is signed by the node its attempt was held on, with the
//     key of the card that node presented (pkg/chain/NODES.md); every card
//     is signed by the operator's card key, when the auditor has it
//     (Options.CardsKey), and a node is held to its card's capacity. A
//     stop of a node without a card is unsigned, as before cards.
//   - No usage a node reports is beyond what its hold could contain
//     (hold.FlagUsage): the record flags it, and it is a finding.
//   - A stop a node reports after RENT ended its attempt at its limit
//     plus grace (HoldExpired) is set aside, and is a finding.
//   - With heads to check (the ledger's, and any given with --since-head),
//     the chain recomputed from the first message passes through each.
//
// Each finding names the job (where there is one), the stream sequence and
// what is wrong.
package audit
