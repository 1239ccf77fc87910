package events

import (
	"fmt"
	"strconv"
	"time"
)

// Event is one fact in the log. The interface is sealed: only the types of
// this package implement it, so that every event has a schema. Only their
// pointers do (*JobSubmitted, not JobSubmitted), so that a type switch has
// one case per type and cannot miss a value that came another way.
type Event interface {
	// Type is the versioned CloudEvents type, such as "e31.job.submitted.v1".
	Type() string
	sealed()
}

// Outcome says how an attempt (and, for the last attempt, the job) ended.
type Outcome string

// The outcomes of DESIGN.md. They are part of the hold record and never change.
const (
	Succeeded     Outcome = "succeeded"
	Failed        Outcome = "failed"
	LimitExceeded Outcome = "limit_exceeded"
	OutOfMemory   Outcome = "out_of_memory"
	// DiskExceeded: the job filled its disk bound (request.disk: ENOSPC or
	// EDQUOT on /out and /tmp) and then did not succeed.
	DiskExceeded Outcome = "disk_exceeded"
	Cancelled    Outcome = "cancelled"
	Rejected     Outcome = "rejected"
	NodeLost     Outcome = "node_lost"
)

// Outcomes are the outcomes of DESIGN.md, every one, in the order above.
var Outcomes = [...]Outcome{Succeeded, Failed, LimitExceeded, OutOfMemory, DiskExceeded, Cancelled, Rejected, NodeLost}

// MaxAttempts bounds how often a job is held again after its node was lost.
// A lost node is not the job's fault, so those attempts count against nothing
// the submitter declared; the bound only stops a job that kills every node it
// lands on from cycling for ever.
const MaxAttempts = 3

// AttemptsCap bounds the attempts of a job whatever they saved: a lost
// attempt that saved a new checkpoint made progress and does not count
// towards MaxAttempts, but a job is never held more than AttemptsCap
// times in all.
const AttemptsCap = 10

// JobSpec is a validated, normalized job declaration: what the job file says,
// with sizes in bytes, durations in seconds and staged data replaced by the
// digests of what was uploaded.
type JobSpec struct {
	Name    string       `json:"name,omitempty"`
	Work    Work         `json:"work"`
	Data    []DataRef    `json:"data,omitempty"`
	Request Request      `json:"request"`
	Output  []OutputDecl `json:"output,omitempty"`
	// Priority orders waiting jobs: higher first, from MinPriority to
	// MaxPriority; then fair share across submitters, then submission order.
	Priority int `json:"priority,omitempty"`
	// After lists jobs that must succeed before this one may be held. If one
	// does not succeed, this job is rejected with that reason.
	After []string `json:"after,omitempty"`
	// Sweep is set on each job of a sweep: which point of it this job is.
	Sweep *SweepPoint `json:"sweep,omitempty"`
	// WaitForNode keeps a job that no node in the pool could ever hold
	// waiting for one to join, instead of rejecting it at once.
	WaitForNode bool `json:"wait_for_node,omitempty"`
	// RetentionSeconds is how long the job's staged data and output are
	// kept after the job ends; absent (0) means DefaultRetention.
	RetentionSeconds float64 `json:"retention_seconds,omitempty"`
	// Checkpoint, when set, is the folder under /out the node saves while
	// the job runs and restores for a later attempt (checkpoint.go).
	Checkpoint *CheckpointSpec `json:"checkpoint,omitempty"`
}

// Bounds of JobSpec.Priority.
const (
	MinPriority = -10
	MaxPriority = 10
)

// SweepPoint is one job of a sweep: the sweep's id, this job's index (from
// 0) among Count, and its parameter value. The job sees them as
// E31_SWEEP_ID, E31_SWEEP_INDEX and E31_SWEEP_VALUE.
//
// A point may be submitted again (`e31 submit --again SWEEP --failed`): the
// new job is another member of the same sweep at the same index, with Again
// the round it was submitted in (1 for the first resubmission) and AgainOf
// the job it replaces. Of the members at one index, the one of the highest
// round is the point's: its outcome is the sweep's, its output the point's.
type SweepPoint struct {
	ID    string `json:"id"`
	Index int    `json:"index"`
	Count int    `json:"count"`
	Value string `json:"value"`
	// Again is the round this member was submitted again in; absent (0)
	// for the sweep's first submission.
	Again int `json:"again,omitempty"`
	// AgainOf is the member this one replaces, the point's member of the
	// round before; absent for the first submission.
	AgainOf string `json:"again_of,omitempty"`
}

// Work is what to run.
type Work struct {
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	// Image, when set, asks for a container executor on a node that has one.
	Image string `json:"image,omitempty"`
}

// DataRef is one staged input, placed at /data/<Name>.
type DataRef struct {
	Name string `json:"name"`
	// Digest is "sha256:<hex>" of the file, or of the folder's manifest.
	Digest string `json:"digest,omitempty"`
	// Kind is "file" or "dir".
	Kind  string `json:"kind,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
	Files int    `json:"files,omitempty"`
	// FromJob names an earlier, succeeded job whose output is staged instead.
	FromJob string `json:"from_job,omitempty"`
	// CheckpointOf names an earlier job whose last checkpoint is staged
	// instead: SUBMIT resolves it to that save's Digest and Kind.
	CheckpointOf string `json:"checkpoint_of,omitempty"`
}

// Request is the compute a job asks for, with its hard wall-clock limit.
type Request struct {
	CPU          float64 `json:"cpu"`
	MemoryBytes  int64   `json:"memory_bytes"`
	GPU          int     `json:"gpu"`
	DiskBytes    int64   `json:"disk_bytes"`
	LimitSeconds float64 `json:"limit_seconds"`
}

// OutputDecl is one declared output: a path or glob under /out.
type OutputDecl struct {
	Path     string `json:"path"`
	Required bool   `json:"required"`
}

// Hold identifies one attempt and the resources held for it. Every event from
// ComputeHeld to ComputeReleased carries it, so each is readable on its own.
type Hold struct {
	Attempt     int     `json:"attempt"`
	Node        string  `json:"node"`
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	GPU         int     `json:"gpu"`
	// DiskBytes is the node disk held: request.disk (the job's writable
	// space) and its staged inputs, which are written to the same disk.
	DiskBytes int64 `json:"disk_bytes"`
	// GPUs are the UUIDs of the devices held, GPU of them, in the order
	// the job sees them (CUDA_VISIBLE_DEVICES 0, 1, …): absent when none
	// are, and in holds of nodes that announced no devices.
	GPUs []string `json:"gpus,omitempty"`
}

// Usage is what the job measurably used, read from the kernel at its end.
type Usage struct {
	CPUSeconds  float64 `json:"cpu_seconds"`
	MaxRSSBytes int64   `json:"max_rss_bytes"`
	// GPUs is what each held device did, where the node measured it
	// (NVML); absent where it did not.
	GPUs []DeviceUsage `json:"gpus,omitempty"`
}

// OutputFile is one returned file: its path under /out, size and digest.
type OutputFile struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	Digest string `json:"digest"`
	// Mode is "0755" for an executable file and "0644" for any other; absent
	// in events written before modes were kept, which means "0644".
	Mode string `json:"mode,omitempty"`
}

// Collected is what RUN found under /out for the declared outputs.
type Collected struct {
	Files []OutputFile `json:"files"`
	// Missing lists declared paths or globs that matched nothing.
	Missing []string `json:"missing"`
	Bytes   int64    `json:"bytes"`
	// Declared is what RUN matched against (the job's output declaration),
	// so that whether a missing output was required is read from the event.
	Declared []OutputDecl `json:"declared,omitempty"`
	// Manifest is the digest of the stored folder manifest of every file
	// collected (paths, modes, sizes, digests): Files lists only the first
	// of them when there are many (see Listed). Absent when nothing was
	// stored.
	Manifest string `json:"manifest,omitempty"`
	// Count is the number of files collected when Files lists only some of
	// them; absent when Files lists them all.
	Count int `json:"count,omitempty"`
}

// JobRequested asks for a job. Anyone allowed to submit may publish it; the
// id in the subject is the client's proposal and SUBMIT decides.
type JobRequested struct {
	Submitter string  `json:"submitter"`
	Spec      JobSpec `json:"spec"`
}

// JobSubmitted records that SUBMIT accepted a job: its declaration is valid
// and every staged input is present and intact.
type JobSubmitted struct {
	Submitter string  `json:"submitter"`
	Spec      JobSpec `json:"spec"`
}

// JobRejected records that a job was refused, and why. It was never held.
type JobRejected struct {
	Reason string `json:"reason"`
	// Problems lists every problem found, one line each, when there were several.
	Problems []string `json:"problems,omitempty"`
}

// ComputeHeld records that RENT held a node's resources for one attempt of a
// job: the meter starts at its ce-time. It carries the spec so that the node
// needs nothing else to run the job.
type ComputeHeld struct {
	Hold
	Submitter string  `json:"submitter"`
	Spec      JobSpec `json:"spec"`
	// GraceSeconds is how long past the job's limit, counted from this
	// event's ce-time, RENT waits for the node's stop before it ends the
	// attempt itself (HoldExpired): the node must have collected the
	// job's output and reported its stop by then. Absent from holds older
	// than it.
	GraceSeconds float64 `json:"grace_seconds,omitempty"`
}

// RunStarted records that the node started the job.
type RunStarted struct {
	Hold
	// Isolation is how the node isolates this attempt (IsolationSandbox,
	// IsolationContainer or IsolationNone): what the hold record reports
	// the attempt ran under. Absent in events from nodes older than it.
	Isolation Isolation `json:"isolation,omitempty"`
	// ResumedFrom names the save (CheckpointSaved.SaveName, "<attempt>.<n>")
	// the node restored under /out before it started the job; absent on a
	// fresh start.
	ResumedFrom string `json:"resumed_from,omitempty"`
}

// RunStopped records how and why the job stopped, what it used and what it
// left under /out.
type RunStopped struct {
	Hold
	Outcome Outcome `json:"outcome"`
	// ExitCode is the job's exit status, absent when it never ran or was killed.
	ExitCode *int      `json:"exit_code,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Usage    Usage     `json:"usage"`
	Output   Collected `json:"output"`
	// Logs is how much the job wrote to stdout and stderr, which RUN kept
	// (bounded) for the submitter. Absent when the job never ran, and in
	// events of nodes that kept no logs.
	Logs *Logs `json:"logs,omitempty"`
	// Signature is the node's ed25519 signature over the stop's canonical
	// bytes (pkg/chain/NODES.md, e31.stop.v1), standard base64, made with
	// the key its card binds to its name: an auditor holding the
	// operator's card key can check offline that the node the attempt was
	// held on measured what the stop says. Absent in stops of nodes
	// without a signing key, and of nodes older than it.
	Signature string `json:"signature,omitempty"`
	// SigningKey names the key that made Signature: "ed25519:" and the
	// standard base64 of the public key.
	SigningKey string `json:"signing_key,omitempty"`
}

// Logs is how much a job wrote to its stdout and stderr, in bytes, and
// whether some of it was not kept (past the node's cap, only the head and
// the tail of each stream are).
type Logs struct {
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	Truncated   bool  `json:"truncated"`
}

// OutputReturned records that the output is stored for the submitter, with
// the attempt's final outcome (a job that exited 0 without a required output
// did not succeed).
type OutputReturned struct {
	Hold
	Outcome Outcome      `json:"outcome"`
	Reason  string       `json:"reason,omitempty"`
	Files   []OutputFile `json:"files"`
	Bytes   int64        `json:"bytes"`
	// Partial is true when the job did not finish: what was there is returned.
	Partial bool     `json:"partial"`
	Missing []string `json:"missing"`
	// Manifest is the digest of the stored folder manifest of every returned
	// file: Files lists only the first of them when there are many (see
	// Listed). Absent when nothing was returned or no manifest was stored.
	Manifest string `json:"manifest,omitempty"`
	// Count is the number of returned files when Files lists only some of
	// them; absent when Files lists them all.
	Count int `json:"count,omitempty"`
}

// ComputeReleased records that the compute of one attempt went back to the
// pool: the meter stops at its ce-time.
type ComputeReleased struct {
	Hold
	Outcome Outcome `json:"outcome"`
	// Final is false only when the job will be held again as a new attempt.
	Final bool `json:"final"`
}

// CancelRequested records that someone asked to stop a job. By is who
// (the last token of the subject, bound by the server's permissions): a
// cancel is honoured only from the job's submitter or the Operator.
//
// With Sweep, the subject's id is a sweep's, and the one event asks to stop
// every member of the sweep of round Round or an earlier one
// (SweepPoint.Again) that is not over, those submitted after it included
// (the sweep may still be being submitted): RENT cancels those that wait,
// RUN stops those it holds, each member as if it had been asked alone, and
// only where By may cancel that member. Such a cancel is about no one job,
// so it is in no hold record (SweepCancel).
type CancelRequested struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	Sweep  bool   `json:"sweep,omitempty"`
	// Round is, with Sweep, the sweep's latest round of resubmission the
	// asker knew of: members submitted again in a later round are not
	// stopped. It is part of the event's id (<sweep>/cancel/sweep-<round>),
	// so that a cancel asked after a resubmission is not dropped as a
	// repeat of one asked before it.
	Round int `json:"round,omitempty"`
}

func (c CancelRequested) what() string {
	if !c.Sweep {
		return ""
	}
	return "sweep-" + strconv.Itoa(c.Round)
}

// SweepCancel returns ev as the cancel of a whole sweep, if it is one.
func SweepCancel(ev Event) (*CancelRequested, bool) {
	c, ok := ev.(*CancelRequested)
	return c, ok && c.Sweep
}

// Operator is the identity whose cancels are honoured for any job.
const Operator = "operator"

// MayCancel reports whether a cancel (or a deletion) asked by who applies
// to a job of submitter.
func MayCancel(who, submitter string) bool { return who == submitter || who == Operator }

// JobCancelled records that a job was cancelled before compute was held.
type JobCancelled struct {
	Reason string `json:"reason"`
}

// LabelContainers is the label (with the value "true") of a node that runs
// jobs that name an image: RUN announces it, RENT holds such jobs only on
// nodes that carry it. It lives here because neither service imports the
// other.
const LabelContainers = "containers"

// NodeAnnounced records that a run node joined the pool, or joined again
// after a restart (a new Boot).
type NodeAnnounced struct {
	Node        string            `json:"node"`
	Boot        string            `json:"boot"`
	CPU         float64           `json:"cpu"`
	MemoryBytes int64             `json:"memory_bytes"`
	GPU         int               `json:"gpu"`
	DiskBytes   int64             `json:"disk_bytes"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Isolation is the weakest isolation the node gives a job: RENT never
	// places a job on a node that announces IsolationNone unless the node
	// also says AllowUnisolated. Absent in announcements of nodes older
	// than it.
	Isolation Isolation `json:"isolation,omitempty"`
	// AllowUnisolated says the node's operator started it with an explicit
	// flag that lets it run jobs without isolation.
	AllowUnisolated bool `json:"allow_unisolated,omitempty"`
	// Devices lists each GPU the node offers, GPU of them, by its bus
	// location; absent on a node that offers none or that announced a
	// count alone (RENT then holds counts, naming no device).
	Devices []Device `json:"devices,omitempty"`
	// Card is the node's card, as its operator signed it: RENT holds the
	// node to the capacity the card names, whatever the announcement
	// says, and the node's stops are signed with the key it names.
	// Absent from nodes without one, and from nodes older than it.
	Card *NodeCard `json:"card,omitempty"`
}

// NodeCard binds a node's name to its signing key and its capacity: the
// operator signs it (pkg/chain/NODES.md, e31.card.v1) with the card key
// kept with the account keys, and the node presents it when it announces
// itself. A node that announces more than its card is held to the card.
type NodeCard struct {
	Node        string  `json:"node"`
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	GPU         int     `json:"gpu"`
	DiskBytes   int64   `json:"disk_bytes"`
	// Isolation is the isolation the operator vouches for; a card that
	// says none holds the node to none whatever it announces.
	Isolation Isolation `json:"isolation,omitempty"`
	// Key is the node's public signing key: "ed25519:" and its standard
	// base64.
	Key string `json:"key"`
	// IssuedAt is when the operator signed the card, in whole seconds.
	IssuedAt time.Time `json:"issued_at"`
	// Issuer is the operator's card key that signed it, written as Key is.
	Issuer string `json:"issuer"`
	// Signature is the issuer's ed25519 signature over the card's
	// canonical bytes, standard base64.
	Signature string `json:"signature"`
}

// Isolation is how a node keeps a job apart from the node and other jobs.
type Isolation string

// The isolations a node may announce.
const (
	// IsolationSandbox is e31's own sandbox: namespaces, cgroup, seccomp,
	// an unprivileged uid.
	IsolationSandbox Isolation = "sandbox"
	// IsolationContainer is a container engine's (jobs that name an image).
	IsolationContainer Isolation = "container"
	// IsolationNone is a plain child process: the job sees the node.
	IsolationNone Isolation = "none"
)

// NodeExpired records that a node stopped renewing its lease: RENT counts it
// lost until it announces itself again, and every attempt held on it ends.
type NodeExpired struct {
	Node   string `json:"node"`
	Boot   string `json:"boot"`
	Reason string `json:"reason"`
}

// HoldLost records that the node holding an attempt was lost before the
// attempt stopped. RELEASE releases it as node_lost, and the job is held
// again as a new attempt; if the node comes back, it does not record the
// lost attempt's result.
type HoldLost struct {
	Hold
	Reason string `json:"reason"`
}

// HoldExpired records that RENT ended an attempt at its limit plus RENT's
// grace because the node had not reported its stop (nor was it lost) by
// then: the node cannot keep a job's meter running past its limit by not
// reporting. RELEASE releases the attempt as limit_exceeded, for good; a
// stop the node reports afterwards is set aside.
type HoldExpired struct {
	Hold
	// Deadline is when the attempt was due to have stopped: its hold's
	// ce-time, plus its limit, plus RENT's grace.
	Deadline time.Time `json:"deadline"`
	Reason   string    `json:"reason"`
}

// The versioned type names. Never change one; add a new version instead.
const (
	TypeJobRequested    = "e31.job.requested.v1"
	TypeJobSubmitted    = "e31.job.submitted.v1"
	TypeJobRejected     = "e31.job.rejected.v1"
	TypeComputeHeld     = "e31.job.held.v1"
	TypeRunStarted      = "e31.job.started.v1"
	TypeRunStopped      = "e31.job.stopped.v1"
	TypeOutputReturned  = "e31.job.returned.v1"
	TypeComputeReleased = "e31.job.released.v1"
	TypeCancelRequested = "e31.job.cancel_requested.v1"
	TypeJobCancelled    = "e31.job.cancelled.v1"
	TypeNodeAnnounced   = "e31.node.announced.v1"
	TypeNodeExpired     = "e31.node.expired.v1"
	TypeHoldLost        = "e31.job.hold_lost.v1"
	TypeHoldExpired     = "e31.job.hold_expired.v1"
	TypeCheckpointSaved = "e31.job.checkpoint_saved.v1"
)

func (*JobRequested) Type() string    { return TypeJobRequested }
func (*JobSubmitted) Type() string    { return TypeJobSubmitted }
func (*JobRejected) Type() string     { return TypeJobRejected }
func (*ComputeHeld) Type() string     { return TypeComputeHeld }
func (*RunStarted) Type() string      { return TypeRunStarted }
func (*RunStopped) Type() string      { return TypeRunStopped }
func (*OutputReturned) Type() string  { return TypeOutputReturned }
func (*ComputeReleased) Type() string { return TypeComputeReleased }
func (*CancelRequested) Type() string { return TypeCancelRequested }
func (*JobCancelled) Type() string    { return TypeJobCancelled }
func (*NodeAnnounced) Type() string   { return TypeNodeAnnounced }
func (*NodeExpired) Type() string     { return TypeNodeExpired }
func (*HoldLost) Type() string        { return TypeHoldLost }
func (*HoldExpired) Type() string     { return TypeHoldExpired }
func (*CheckpointSaved) Type() string { return TypeCheckpointSaved }

func (*JobRequested) sealed()    {}
func (*JobSubmitted) sealed()    {}
func (*JobRejected) sealed()     {}
func (*ComputeHeld) sealed()     {}
func (*RunStarted) sealed()      {}
func (*RunStopped) sealed()      {}
func (*OutputReturned) sealed()  {}
func (*ComputeReleased) sealed() {}
func (*CancelRequested) sealed() {}
func (*JobCancelled) sealed()    {}
func (*NodeAnnounced) sealed()   {}
func (*NodeExpired) sealed()     {}
func (*HoldLost) sealed()        {}
func (*HoldExpired) sealed()     {}
func (*CheckpointSaved) sealed() {}

// kind describes where an event type lives: its subject token and whether it
// belongs to an attempt (and so carries a Hold).
type kind struct {
	token     string
	perHold   bool
	newEvent  func() Event
	shortName string // the Go-independent name shown in hold records and the CLI
	shape     *shape // of its body (see decodeBody)
}

// kinds is the registry of every decodable type. Old versions stay here for ever.
var kinds = map[string]kind{
	TypeJobRequested:    {"requested", false, func() Event { return new(JobRequested) }, "JobRequested", shapeOf[JobRequested]()},
	TypeJobSubmitted:    {"submitted", false, func() Event { return new(JobSubmitted) }, "JobSubmitted", shapeOf[JobSubmitted]()},
	TypeJobRejected:     {"rejected", false, func() Event { return new(JobRejected) }, "JobRejected", shapeOf[JobRejected]()},
	TypeComputeHeld:     {"held", true, func() Event { return new(ComputeHeld) }, "ComputeHeld", shapeOf[ComputeHeld]()},
	TypeRunStarted:      {"started", true, func() Event { return new(RunStarted) }, "RunStarted", shapeOf[RunStarted]()},
	TypeRunStopped:      {"stopped", true, func() Event { return new(RunStopped) }, "RunStopped", shapeOf[RunStopped]()},
	TypeOutputReturned:  {"returned", true, func() Event { return new(OutputReturned) }, "OutputReturned", shapeOf[OutputReturned]()},
	TypeComputeReleased: {"released", true, func() Event { return new(ComputeReleased) }, "ComputeReleased", shapeOf[ComputeReleased]()},
	TypeCancelRequested: {"cancel", false, func() Event { return new(CancelRequested) }, "CancelRequested", shapeOf[CancelRequested]()},
	TypeJobCancelled:    {"cancelled", false, func() Event { return new(JobCancelled) }, "JobCancelled", shapeOf[JobCancelled]()},
	TypeNodeAnnounced:   {"announced", false, func() Event { return new(NodeAnnounced) }, "NodeAnnounced", shapeOf[NodeAnnounced]()},
	TypeNodeExpired:     {"expired", false, func() Event { return new(NodeExpired) }, "NodeExpired", shapeOf[NodeExpired]()},
	TypeHoldLost:        {"lost", true, func() Event { return new(HoldLost) }, "HoldLost", shapeOf[HoldLost]()},
	TypeHoldExpired:     {"overrun", true, func() Event { return new(HoldExpired) }, "HoldExpired", shapeOf[HoldExpired]()},
	TypeDeleteRequested: {"delete", false, func() Event { return new(DeleteRequested) }, "DeleteRequested", shapeOf[DeleteRequested]()},
	TypeDeleted:         {"deleted", false, func() Event { return new(Deleted) }, "Deleted", shapeOf[Deleted]()},
	TypeDeviceWithdrawn: {"device_withdrawn", false, func() Event { return new(DeviceWithdrawn) }, "DeviceWithdrawn", shapeOf[DeviceWithdrawn]()},
	TypeDeviceRestored:  {"device_restored", false, func() Event { return new(DeviceRestored) }, "DeviceRestored", shapeOf[DeviceRestored]()},
	// An attempt saves many times: its id carries the save's number too
	// (CheckpointSaved.what), not the attempt alone.
	TypeCheckpointSaved: {"saved", false, func() Event { return new(CheckpointSaved) }, "CheckpointSaved", shapeOf[CheckpointSaved]()},
}

// Types lists every event type this package can decode.
func Types() []string {
	out := make([]string, 0, len(kinds))
	for t := range kinds {
		out = append(out, t)
	}
	return out
}

// Name is the short, stable name of an event type ("ComputeHeld"), as it
// appears in hold records. Unknown types are returned as they are.
func Name(ceType string) string {
	if k, ok := kinds[ceType]; ok {
		return k.shortName
	}
	return ceType
}

// held is implemented by every event that embeds a Hold.
type held interface{ held() Hold }

func (h Hold) held() Hold { return h }

// HoldOf returns the attempt an event belongs to, if it belongs to one.
func HoldOf(ev Event) (Hold, bool) {
	if h, ok := ev.(held); ok {
		return h.held(), true
	}
	return Hold{}, false
}

// ID is the deterministic id of an event about subject (a job or node id):
// "<subject>/<kind>" or, for an attempt, "<subject>/<kind>/<attempt>"; a
// deletion adds what it deletes ("<job>/deleted/output"), a sweep's cancel
// its round ("<sweep>/cancel/sweep-0"). It is both ce-id
// and Nats-Msg-Id, so a retried publish is stored once.
func ID(subject string, ev Event) string {
	k := kinds[ev.Type()]
	if h, ok := HoldOf(ev); ok && k.perHold {
		return subject + "/" + k.token + "/" + strconv.Itoa(h.Attempt)
	}
	if c, ok := ev.(interface{ change() string }); ok {
		return subject + "/" + k.token + "/" + c.change()
	}
	if n, ok := ev.(nodeEvent); ok {
		return subject + "/" + k.token + "/" + n.boot()
	}
	if w, ok := ev.(interface{ what() string }); ok && w.what() != "" {
		return subject + "/" + k.token + "/" + w.what()
	}
	return subject + "/" + k.token
}

func (n NodeAnnounced) boot() string { return n.Boot }
func (n NodeExpired) boot() string   { return n.Boot }
func (n NodeAnnounced) node() string { return n.Node }
func (n NodeExpired) node() string   { return n.Node }

// ender is implemented by the events that can end a job.
type ender interface{ ends() bool }

func (JobRejected) ends() bool       { return true }
func (JobCancelled) ends() bool      { return true }
func (e ComputeReleased) ends() bool { return e.Final }

// Terminal reports whether ev ends its job: nothing follows it.
func Terminal(ev Event) bool {
	e, ok := ev.(ender)
	return ok && e.ends()
}

// ErrUnknownType is returned for an event type this version cannot decode.
// Readers skip such events rather than stop: newer writers may add types.
var ErrUnknownType = fmt.Errorf("events: unknown event type")

// FinalOutput reads one job's history: whether the job is over, its final
// outcome, and what its last attempt returned (nil if nothing was).
func FinalOutput(history []Envelope) (over bool, outcome Outcome, returned *OutputReturned) {
	byAttempt := map[int]*OutputReturned{}
	for _, e := range history {
		switch ev := e.Event.(type) {
		case *OutputReturned:
			byAttempt[ev.Attempt] = ev
		case *ComputeReleased:
			if ev.Final {
				return true, ev.Outcome, byAttempt[ev.Attempt]
			}
		case *JobRejected:
			return true, Rejected, nil
		case *JobCancelled:
			return true, Cancelled, nil
		}
	}
	return false, "", nil
}
