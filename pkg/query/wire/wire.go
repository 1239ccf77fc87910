// Package wire is the query side of e31 on the wire: the subjects of the
// request/reply endpoints through which clients ask the ledger, the
// scheduler and OUTPUT about jobs, and their requests and replies (JSON).
// Commands never go this way: everything that changes a job is an event on
// the log. pkg/query serves these endpoints; pkg/client asks them.
package wire

import (
	"strings"
	"time"

	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/hold"
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

// How long a request that waits (a Wait of its own, or for the log to be
// read as far as it asks) may be held: DefaultWait when it gives no Wait,
// and never more than MaxWait, by when a long poll answers and the client
// asks again. A server may answer sooner (query.Limits.MaxWait), never
// later: a client bounds its own request by WaitOf.
const (
	DefaultWait = 5 * time.Second
	MaxWait     = 30 * time.Second
)

// WaitOf is how long a request that says wait may be held.
func WaitOf(wait time.Duration) time.Duration {
	if wait <= 0 {
		return DefaultWait
	}
	return min(wait, MaxWait)
}

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
	user, _ := parseQuery(subject)
	return user
}

// ServiceOf is the service a query subject asks, e31.api.<user>.<service>.…
// ("ledger", "rent", "output"), or "" if the subject is not one.
func ServiceOf(subject string) string {
	_, service := parseQuery(subject)
	return service
}

// parseQuery reads the user and the service of a query subject: this
// package's subjects are read here alone, as the log's are in pkg/events.
func parseQuery(subject string) (user, service string) {
	rest, ok := strings.CutPrefix(subject, apiPrefix)
	if !ok {
		return "", ""
	}
	user, rest, ok = strings.Cut(rest, ".")
	if !ok {
		return "", ""
	}
	service, _, ok = strings.Cut(rest, ".")
	if !ok {
		return user, ""
	}
	return user, service
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
	Record *hold.HoldRecord `json:"record,omitempty"`
	Error  string           `json:"error,omitempty"`
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
	Records []*hold.HoldRecord `json:"records"`
	More    bool               `json:"more"`
	Applied uint64             `json:"applied"`
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
	// Head.Seq (which is Applied): see pkg/chain.
	Head  chain.Head `json:"head"`
	Error string     `json:"error,omitempty"`
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
	// LostSeconds is the held time of the attempts that ended node_lost
	// (LostAttempts of them): the pool's loss, not billed, so in none of
	// the figures above. Their records still show it.
	LostSeconds  float64 `json:"lost_seconds"`
	LostAttempts int     `json:"lost_attempts,omitempty"`
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
