// Package api is the query side of e31: the hold record of DESIGN.md and the
// request/reply endpoints through which the CLI asks the ledger and the
// scheduler about jobs. Commands never go this way: everything that changes
// a job is an event on the log.
package api

import (
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// Subjects of the query endpoints (NATS request/reply, served with nats.go's
// micro package so they show up in `nats micro ls`). Each carries the user
// who asks, e31.api.<user>.<service>.<endpoint>: the server lets a user
// publish only under its own name (see pkg/auth), so a service reads who
// asks from the subject and answers a submitter about its own jobs alone.
const (
	// EndpointRecord answers a RecordRequest with a RecordReply.
	EndpointRecord = "record"
	// EndpointList answers a ListRequest with a ListReply.
	EndpointList = "list"
	// EndpointTotals answers a TotalsRequest with a TotalsReply.
	EndpointTotals = "totals"
	// EndpointEvents answers an EventsRequest with an EventsReply.
	EndpointEvents = "events"
	// EndpointHead answers with a LedgerInfo: how far the ledger has read
	// and its hash chain head.
	EndpointHead = "head"
	// EndpointWhy is the scheduler's: it answers a WhyRequest with a
	// WhyReply.
	EndpointWhy = "why"
)

// LedgerEndpoints are the ledger's endpoints, each at LedgerSubject.
var LedgerEndpoints = []string{EndpointRecord, EndpointList, EndpointTotals, EndpointEvents, EndpointHead}

// apiPrefix starts every query subject.
const apiPrefix = "e31.api."

// LedgerSubject is where user asks the ledger's endpoint (EndpointRecord, …).
// A user of "*" gives the subject the ledger serves.
func LedgerSubject(user, endpoint string) string { return apiPrefix + user + ".ledger." + endpoint }

// RentWhySubject is where user asks the scheduler why a job waits.
func RentWhySubject(user string) string { return apiPrefix + user + ".rent." + EndpointWhy }

// UserSubjects matches every query subject of user: what the server lets
// it publish under e31.api.
func UserSubjects(user string) string { return apiPrefix + user + ".>" }

// UserOf is the user a query subject names, e31.api.<user>.…, or "" if the
// subject is not one.
func UserOf(subject string) string {
	rest, ok := strings.CutPrefix(subject, apiPrefix)
	if !ok {
		return ""
	}
	user, _, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	return user
}

// CodeNoSuchJob is the Code of an answer about a job that does not exist or
// is not the asker's: nobody is told which.
const CodeNoSuchJob = "no_such_job"

// CodeBusy is the Code of an answer to a request beyond one of the query
// services' limits (requests in flight, long polls held open, per user or
// in all; see pkg/query): nothing was done, and asking again later may
// succeed. Its Error reads "busy: …, retry".
const CodeBusy = "busy"

// CodeNotPermitted is the Code of an answer to a question the asker may
// not ask: the ledger's head (counts, sequences, the hash chain) is for the
// auditor and the operator only.
const CodeNotPermitted = "not_permitted"

// Auditor is the user every auditor asks as: auditors read everything and
// change nothing, so they need not be told apart here.
const Auditor = "auditor"

// SeesAll reports whether the query services answer user about every job,
// not only its own: the auditor and the operator.
func SeesAll(user string) bool { return user == Auditor || user == events.Operator }

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
	// Isolation is how the last attempt that started was isolated
	// (RunStarted's isolation): sandbox, container or none.
	Isolation events.Isolation `json:"isolation,omitempty"`

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
	// Logs is how much the last attempt that ran wrote to stdout and
	// stderr (RunStopped's logs): `e31 logs` shows what was kept.
	Logs *events.Logs `json:"logs,omitempty"`
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
	Logs             *events.Logs `json:"logs,omitempty"`
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
// client that saw an event reads a record that includes it. With Fresh it
// reads the log's last sequence itself and waits for that: the answer
// includes everything logged before the request, and the client needs no
// access to the log. With UntilOver it answers once the job is over, or
// after Wait (at most 30 s): a long poll, which is how `e31 wait` waits.
//
// A submitter is answered about its own jobs only; any other job is "no
// such job", exactly as one that does not exist.
type RecordRequest struct {
	Job       string        `json:"job"`
	MinSeq    uint64        `json:"min_seq,omitempty"`
	Wait      time.Duration `json:"wait,omitempty"`
	Fresh     bool          `json:"fresh,omitempty"`
	UntilOver bool          `json:"until_over,omitempty"`
}

// RecordReply is the answer to a RecordRequest. A long poll that ends
// before the job has a record answers with neither Record nor Error.
type RecordReply struct {
	Record *HoldRecord `json:"record,omitempty"`
	Error  string      `json:"error,omitempty"`
	// Code says what Error is, for a program: CodeNoSuchJob.
	Code string `json:"code,omitempty"`
	// Applied is the last log sequence the ledger has applied. A
	// submitter learns nothing of the log beyond its own jobs: it is told
	// at most the MinSeq it asked for (so Applied >= MinSeq still says the
	// ledger had caught up), and 0 when it asked for none.
	Applied uint64 `json:"applied"`
}

// ListRequest selects records; zero fields select everything the asking
// user may see: a submitter sees its own records only, and asking for
// another submitter's is an error.
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
	// Fresh answers as of everything logged before the request (see
	// RecordRequest).
	Fresh bool `json:"fresh,omitempty"`
	// UntilOver answers once every selected job is over, or after Wait (at
	// most 30 s): how `e31 wait` waits for a sweep.
	UntilOver bool          `json:"until_over,omitempty"`
	Wait      time.Duration `json:"wait,omitempty"`
}

// ListReply is one page of records.
type ListReply struct {
	Records []*HoldRecord `json:"records"`
	More    bool          `json:"more"`
	Applied uint64        `json:"applied"`
	// CatchingUp says the ledger had not read the log as far as asked
	// (MinSeq, or with Fresh the log's end) when it answered: the records
	// may not show everything yet. A submitter is told this rather than
	// how far the ledger has read (see Applied of RecordReply).
	CatchingUp bool   `json:"catching_up,omitempty"`
	Error      string `json:"error,omitempty"`
	// Code says what Error is, for a program: CodeBusy.
	Code string `json:"code,omitempty"`
}

// LedgerInfo says how far the ledger has read the log. It is the answer to
// the auditor and the operator only: a submitter asking for it is answered
// with Error and CodeNotPermitted, and no figure.
type LedgerInfo struct {
	Applied  uint64 `json:"applied"`
	LastSeq  uint64 `json:"last_seq"`
	Behind   uint64 `json:"behind"`
	Records  int    `json:"records"`
	CaughtUp bool   `json:"caught_up"`
	// Head is the hash chain over every message the ledger has read, as of
	// Head.Seq (which is Applied): see DigestVersion.
	Head  Head   `json:"head"`
	Error string `json:"error,omitempty"`
	// Code says what Error is, for a program: CodeNotPermitted, CodeBusy.
	Code string `json:"code,omitempty"`
}

// TotalsRequest asks what each submitter would be billed for a period (a
// submitter is told its own bill only):
// the meter of every released attempt, cut at the period's edges (Since
// inclusive, Until exclusive; zero means unbounded), so that the totals of
// consecutive periods add up to the total of their union.
type TotalsRequest struct {
	Since     time.Time `json:"since,omitempty"`
	Until     time.Time `json:"until,omitempty"`
	Submitter string    `json:"submitter,omitempty"`
	MinSeq    uint64    `json:"min_seq,omitempty"`
	// Fresh answers as of everything logged before the request.
	Fresh bool `json:"fresh,omitempty"`
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
	// CatchingUp is as in ListReply.
	CatchingUp bool   `json:"catching_up,omitempty"`
	Error      string `json:"error,omitempty"`
	// Code says what Error is, for a program: CodeBusy.
	Code string `json:"code,omitempty"`
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
	// Queued is how many jobs wait in all: told to the auditor and the
	// operator only.
	Queued int    `json:"queued,omitempty"`
	Error  string `json:"error,omitempty"`
	// Code says what Error is, for a program: CodeBusy.
	Code string `json:"code,omitempty"`
}

// EventsRequest asks for the events of one job, as stored, after the stream
// sequence After (0: from the first). With Wait (at most 30 s), a request
// that finds nothing new waits that long for the job's next event, even
// after the job is over (deletions come later): how a submitter follows its
// job without access to the log. Fresh is as in RecordRequest.
type EventsRequest struct {
	Job   string        `json:"job"`
	After uint64        `json:"after,omitempty"`
	Wait  time.Duration `json:"wait,omitempty"`
	Fresh bool          `json:"fresh,omitempty"`
}

// EventsReply is one page of a job's events, in log order.
type EventsReply struct {
	Events []StoredEvent `json:"events"`
	// More says that more events were logged than fit in this reply: ask
	// again with After set to the last one's sequence.
	More bool `json:"more,omitempty"`
	// Over says that the job is over as far as the ledger has read.
	Over    bool   `json:"over,omitempty"`
	Applied uint64 `json:"applied"`
	Error   string `json:"error,omitempty"`
	// Code says what Error is, for a program: CodeNoSuchJob.
	Code string `json:"code,omitempty"`
}
