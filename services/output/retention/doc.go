// Package retention keeps what jobs stored only as long as they may use
// it, and removes it from the store afterwards. OUTPUT runs it (see
// package output): the store is OUTPUT's.
//
// What a job stores (its staged data, its output, and the logs of its
// attempts: what they wrote to stdout and stderr, for `e31 logs`) lives
// until its declared retention passes after the job's end
// (spec.retention_seconds, default 7 days), or until its submitter deletes
// it. Logs go with the output: a deletion of the output deletes them too,
// and a job that returned no file but printed something holds its output
// (its logs) until then. The hold record stays for ever and shows when
// each went.
//
// Decide from the log. Every deletion is a fact in the job's log: a
// submitter's DeleteRequested (e31 output --delete, e31 data rm) and, once
// done, OUTPUT's Deleted, recorded with bus.React on the job's last event
// and decided by DecideDelete, a pure function of the job's history. A
// timer or request handled twice finds the deletion in the log and
// records nothing; a request made while the job runs waits for its end.
//
// Count from the log. Refs is a projection of the log, rebuilt on every
// start from OUTPUT's checkpoint (Checkpoint: the first event of the
// oldest job it still keeps, in the bucket events.OutputBucket), or from
// the log's first event without one: for every job the roots it holds (its
// staged inputs: files and folders by digest, a from_job folder included;
// every attempt's output manifest), and for every root how many jobs hold
// it. Before a sweep the roots are expanded into the objects they are
// stored in (stage.Expander) and counted per object (objectIndex): an object
// is deleted only when no live root is stored in it. Blobs are shared
// between jobs by design: a file two jobs staged, a part two large files
// share, an output a later job staged are all kept while one job holds
// them. Logs are the exception: stored under their job's name, not by
// content, each is its job's alone, so Refs keeps the attempts that ran
// (Held.Logs) and the sweep after a deletion of the output removes their
// logs (stage.DeleteLog) without counting.
//
// Keep only what retention needs. The projection forgets a job once it is
// over and holds nothing: at once if it never stored anything, or a day
// (Config.KeepDeleted) after its last deletion, so that the stored
// endpoint still shows what went and when; the hold record shows it for
// ever. A job's own later events (a late request to delete) then change
// nothing, and a sweep of a job forgotten reads what its deletions dropped
// from the job's log. Its heap is bounded by the jobs within their
// retention, not by every job there ever was.
//
// Trigger without polling. Retention is a scheduled message (ADR-51) in the
// E31_TIMERS stream: when a job ends, OUTPUT sets a timer for its end plus
// its retention; a request on an ended job sets one for now. The server
// publishes it at its time and a durable consumer shared by every OUTPUT
// instance handles it (Settle). Each Deleted sets a sweep timer a grace
// period later (DefaultDeleteGrace), and the sweep removes the freed
// objects. Between timers OUTPUT does no retention work at all. On every
// start, once its projection has read the log, OUTPUT sets again every
// timer a job is waiting for: a timer set twice is the same timer, so a
// timer lost while OUTPUT was down costs nothing but a moment.
//
// Why the grace period. A client that finds a blob stored does not send it
// again, and a node whose output matches stored bytes does not store them
// again: for a moment their job holds bytes the log does not show yet. The
// sweep runs well after such a job's reference reaches the log (SUBMIT's
// check and RUN's collection take seconds; the grace is fifteen minutes),
// on a projection that has caught up with the log. What it cannot cover: a
// client whose upload took longer than the grace, between finding a blob
// stored and publishing its request; SUBMIT then refuses the job, naming
// the missing file, and submitting again uploads it. Nor does a job waiting
// for a from_job that has not finished hold that job's output: if the
// earlier job's retention passes before the later one runs, the later one
// fails, saying its input was deleted.
package retention
