// Package events defines the facts e31 records about jobs and nodes, how they
// travel on NATS JetStream, and where they are stored.
//
// # The life of a job
//
// Every job moves through one log, the E31 stream. Each step appends a fact in
// the past tense; nothing happens to a job that the log does not show.
//
//		requested ──▶ submitted ──▶ held ──▶ started ──▶ stopped ──▶ returned ──▶ released
//		     │             │          │                     ▲                        │
//		     ▼             ▼          └──(cancel/failed to start)┘                   ▼
//		 rejected      cancelled                                        (final, or held again
//		                                                                 as a new attempt)
//
//	  - JobRequested: a client (the CLI or any system that speaks the published
//	    JSON Schemas) asks for a job, proposing its id.
//	  - JobSubmitted / JobRejected: SUBMIT accepted the declaration and found every
//	    staged input intact, or refused it with the reason.
//	  - ComputeHeld: RENT holds a node's resources for one attempt; the meter starts.
//	  - RunStarted / RunStopped: RUN on that node started the job and recorded how
//	    and why it stopped, with measured usage and the output it collected.
//	  - CheckpointSaved: RUN on that node saved the job's checkpoint folder
//	    while it ran or as it stopped; the next attempt resumes from the last
//	    save that counts (see checkpoint.go).
//	  - OutputReturned: OUTPUT verified the collected output and recorded the
//	    attempt's final outcome.
//	  - ComputeReleased: RELEASE gave the compute back; the meter stops. Final says
//	    whether the job is over or will be held again (a lost node is not the
//	    job's fault).
//	  - CancelRequested / JobCancelled: a submitter asked to stop the job; a job
//	    that was never held ends with JobCancelled.
//	  - NodeAnnounced: a run node joined (or re-joined) the pool with its capacity,
//	    its GPUs listed by device, and the card its operator signed for it.
//	  - DeviceWithdrawn / DeviceRestored: a node stopped offering one of its GPUs
//	    (it went bad) or offers it again (see devices.go).
//	  - HoldLost / HoldExpired: RENT ended an attempt the node will not report:
//	    its node was lost, or it had not reported its stop by its limit plus
//	    RENT's grace (the node cannot keep the meter running by keeping quiet).
//	  - DeleteRequested / Deleted: after the job's end, its staged data or its
//	    output was deleted, asked for or because its retention passed (see
//	    retention.go).
//
// A job is over once it logged JobRejected, JobCancelled or a final
// ComputeReleased. After that only deletions (and a late CancelRequested,
// which changes nothing) may follow; see AfterEnd.
//
// # Rules for changing this package
//
// Type names (ce-type) carry a version and never depend on a Go type name.
// Fields are added, never renamed or reused; a breaking change is a new
// version, and the old decoder stays, because the ledger replays from the
// first event ever written. The JSON Schemas under schema/ are the contract
// for systems outside the project, and a test keeps them and the Go types in
// step.
package events
