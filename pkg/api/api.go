// Package api is the query side of e31: the hold record of DESIGN.md and the
// request/reply endpoints through which the CLI asks the ledger and the
// scheduler about jobs. Commands never go this way: everything that changes
// a job is an event on the log.
package api

import (
	"time"

	"github.com/e31net/e31/pkg/events"
)

// Subjects of the query endpoints (NATS request/reply, served with nats.go's
// micro package so they show up in `nats micro ls`).
const (
	// LedgerRecord answers a RecordRequest with a RecordReply.
	LedgerRecord = "e31.api.ledger.record"
	// LedgerList answers a ListRequest with a ListReply.
	LedgerList = "e31.api.ledger.list"
	// LedgerInfo answers with a LedgerInfo.
	LedgerInfoSubject = "e31.api.ledger.info"
	// LedgerTotals answers a TotalsRequest with a TotalsReply.
	LedgerTotals = "e31.api.ledger.totals"
	// RentWhy answers a WhyRequest with a WhyReply.
	RentWhy = "e31.api.rent.why"
)

// States of a job, as `e31 status` shows them.
const (
	StateSubmitted = "submitted" // requested, not yet accepted
	StateWaiting   = "waiting"   // accepted, waiting for compute
	StateHeld      = "held"      // compute held, not yet started
	StateRunning   = "running"
	StateStopped   = "stopped"  // stopped, output not yet returned
	StateReturned  = "returned" // output returned, compute not yet released
	StateReleased  = "released" // over: compute released
	StateRejected  = "rejected" // over: never held
	StateCancelled = "cancelled"
)

// HoldRecord is one job's record of what was held for it. Fields may be
// added, never renamed: programs outside the project read it.
//
// Top-level times and results are those of the job's last attempt, except
// HeldSeconds, which is the meter's total over every attempt.
type HoldRecord struct {
	Job       string `json:"job"`
	Name      string `json:"name"`
	Submitter string `json:"submitter"`
	Node      string `json:"node"`
	State     string `json:"state"`

	Outcome  events.Outcome `json:"outcome,omitempty"`
	ExitCode *int           `json:"exit_code,omitempty"`
	Reason   string         `json:"reason,omitempty"`

	Request Request `json:"request"`
	// Sweep is set on the jobs of a sweep: which point of it this job is.
	Sweep *events.SweepPoint `json:"sweep,omitempty"`

	SubmittedAt      *time.Time `json:"submitted_at,omitempty"`
	HeldAt           *time.Time `json:"held_at,omitempty"`
	StartedAt        *time.Time `json:"started_at,omitempty"`
	StoppedAt        *time.Time `json:"stopped_at,omitempty"`
	OutputReturnedAt *time.Time `json:"output_returned_at,omitempty"`
	ReleasedAt       *time.Time `json:"released_at,omitempty"`

	HeldSeconds float64 `json:"held_seconds"`
	// CPUCoreSeconds, MemoryGiBSeconds and GPUSeconds are the meter: for
	// each attempt the resources held times the time they were held (from
	// ComputeHeld's ce-time to ComputeReleased's), summed over every
	// attempt. They are what a submitter is billed for; Usage, what the job
	// measurably used, sits beside them and never replaces them.
	CPUCoreSeconds   float64      `json:"cpu_core_seconds"`
	MemoryGiBSeconds float64      `json:"memory_gib_seconds"`
	GPUSeconds       float64      `json:"gpu_seconds"`
	Usage            events.Usage `json:"usage"`
	Output           Output       `json:"output"`
	// DataDeletedAt is when the job's staged data was deleted: the ce-time
	// of Deleted.
	DataDeletedAt *time.Time `json:"data_deleted_at,omitempty"`

	Attempts []Attempt  `json:"attempts,omitempty"`
	Events   []EventRef `json:"events"`
	// EventsDigest commits to the exact stored events the record was built
	// from: "sha256:" and the hex SHA-256 of their event digests (see
	// DigestVersion), in the order of Events. Absent from a record built
	// from decoded events alone.
	EventsDigest string `json:"events_digest,omitempty"`
}

// Request is what the job asked for, as the hold record shows it.
type Request struct {
	CPU          float64 `json:"cpu"`
	MemoryBytes  int64   `json:"memory_bytes"`
	GPU          int     `json:"gpu"`
	DiskBytes    int64   `json:"disk_bytes"`
	LimitSeconds float64 `json:"limit_seconds"`
}

// Output summarizes what was returned.
type Output struct {
	Files   int                 `json:"files"`
	Bytes   int64               `json:"bytes"`
	Partial bool                `json:"partial"`
	Missing []string            `json:"missing"`
	List    []events.OutputFile `json:"list,omitempty"`
	// Manifest is the digest of the manifest of every returned file: List
	// has only the first of them when there are many.
	Manifest string `json:"manifest,omitempty"`
	// DeletedAt is when the output was deleted (its retention passed, or
	// its submitter asked): the ce-time of Deleted. The record stays.
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
}

// Resources are what was held for an attempt, as ComputeHeld says.
type Resources struct {
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	GPU         int     `json:"gpu"`
	DiskBytes   int64   `json:"disk_bytes"`
}

// Attempt is one hold of the job on one node.
type Attempt struct {
	Attempt          int            `json:"attempt"`
	Node             string         `json:"node"`
	Held             Resources      `json:"held"`
	Outcome          events.Outcome `json:"outcome,omitempty"`
	ExitCode         *int           `json:"exit_code,omitempty"`
	Reason           string         `json:"reason,omitempty"`
	HeldAt           *time.Time     `json:"held_at,omitempty"`
	StartedAt        *time.Time     `json:"started_at,omitempty"`
	StoppedAt        *time.Time     `json:"stopped_at,omitempty"`
	OutputReturnedAt *time.Time     `json:"output_returned_at,omitempty"`
	ReleasedAt       *time.Time     `json:"released_at,omitempty"`
	HeldSeconds      float64        `json:"held_seconds"`
	// The meter of this attempt: Held times HeldSeconds, zero until the
	// compute is released (memory in GiB, 2^30 bytes).
	CPUCoreSeconds   float64      `json:"cpu_core_seconds"`
	MemoryGiBSeconds float64      `json:"memory_gib_seconds"`
	GPUSeconds       float64      `json:"gpu_seconds"`
	Usage            events.Usage `json:"usage"`
}

// EventRef names one event a record was built from.
type EventRef struct {
	Seq  uint64 `json:"seq"`
	Type string `json:"type"`
	// Digest is "sha256:" and the hex event digest of the stored message
	// (see DigestVersion): an auditor holding the record can tell whether
	// the event in a copy of the log is the one the record was built from.
	Digest string `json:"digest,omitempty"`
}

// Over reports whether the job has ended.
func (r *HoldRecord) Over() bool {
	switch r.State {
	case StateReleased, StateRejected, StateCancelled:
		return true
	}
	return false
}

// RecordRequest asks for one job's record. With MinSeq the ledger answers
// only once it has applied the log up to that sequence (or after Wait), so a
// client that saw an event reads a record that includes it.
type RecordRequest struct {
	Job    string        `json:"job"`
	MinSeq uint64        `json:"min_seq,omitempty"`
	Wait   time.Duration `json:"wait,omitempty"`
}

// RecordReply is the answer to a RecordRequest.
type RecordReply struct {
	Record *HoldRecord `json:"record,omitempty"`
	Error  string      `json:"error,omitempty"`
	// Applied is the last log sequence the ledger has applied.
	Applied uint64 `json:"applied"`
}

// ListRequest selects records; zero fields select everything.
type ListRequest struct {
	Submitter string    `json:"submitter,omitempty"`
	Node      string    `json:"node,omitempty"`
	Since     time.Time `json:"since,omitempty"`
	Until     time.Time `json:"until,omitempty"`
	// Sweep selects the jobs of one sweep.
	Sweep string `json:"sweep,omitempty"`
	// After pages: records of jobs submitted after this job, in log order.
	After  string `json:"after,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	MinSeq uint64 `json:"min_seq,omitempty"`
}

// ListReply is one page of records.
type ListReply struct {
	Records []*HoldRecord `json:"records"`
	More    bool          `json:"more"`
	Applied uint64        `json:"applied"`
	Error   string        `json:"error,omitempty"`
}

// LedgerInfo says how far the ledger has read the log.
type LedgerInfo struct {
	Applied  uint64 `json:"applied"`
	LastSeq  uint64 `json:"last_seq"`
	Behind   uint64 `json:"behind"`
	Records  int    `json:"records"`
	CaughtUp bool   `json:"caught_up"`
	// Head is the hash chain over every message the ledger has read, as of
	// Head.Seq (which is Applied): see DigestVersion.
	Head Head `json:"head"`
}

// TotalsRequest asks what each submitter would be billed for a period:
// the meter of every released attempt, cut at the period's edges (Since
// inclusive, Until exclusive; zero means unbounded), so that the totals of
// consecutive periods add up to the total of their union.
type TotalsRequest struct {
	Since     time.Time `json:"since,omitempty"`
	Until     time.Time `json:"until,omitempty"`
	Submitter string    `json:"submitter,omitempty"`
	MinSeq    uint64    `json:"min_seq,omitempty"`
}

// Totals is one submitter's bill for a period.
type Totals struct {
	Submitter string `json:"submitter"`
	// Jobs counts jobs with held time in the period; Attempts, their
	// attempts with held time in it.
	Jobs             int     `json:"jobs"`
	Attempts         int     `json:"attempts"`
	HeldSeconds      float64 `json:"held_seconds"`
	CPUCoreSeconds   float64 `json:"cpu_core_seconds"`
	MemoryGiBSeconds float64 `json:"memory_gib_seconds"`
	GPUSeconds       float64 `json:"gpu_seconds"`
	// Open counts attempts held in the period and not yet released: their
	// meter is still running and is not in these totals yet.
	Open int `json:"open,omitempty"`
}

// TotalsReply has one Totals per submitter, by name.
type TotalsReply struct {
	Submitters []Totals `json:"submitters"`
	Applied    uint64   `json:"applied"`
	Error      string   `json:"error,omitempty"`
}

// WhyRequest asks the scheduler why a job is where it is. With MinSeq the
// scheduler answers once it has read the log that far (or after a few
// seconds), like RecordRequest.
type WhyRequest struct {
	Job    string `json:"job"`
	MinSeq uint64 `json:"min_seq,omitempty"`
}

// WhyReply is the scheduler's answer: for a waiting job, its place in the
// queue and what it waits for, in words a person understands.
type WhyReply struct {
	Job      string `json:"job"`
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
	Position int    `json:"position,omitempty"`
	Queued   int    `json:"queued,omitempty"`
	Error    string `json:"error,omitempty"`
}
