// Package hold is the hold record of DESIGN.md: one job's record of what
// was held for it, when, and how it ended, as the ledger projects it from
// the log and the audit derives it again. Programs outside the project read
// it (e31 ledger --json, e31 wait --json): fields may be added, never
// renamed.
package hold

import (
	"time"

	"github.com/e31net/e31/pkg/events"
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
	// LostSeconds is the part of HeldSeconds held by attempts that ended
	// node_lost: the pool's loss, not billed to the submitter (e31 ledger
	// --totals counts it apart). Absent when no attempt was lost.
	LostSeconds float64 `json:"lost_seconds,omitempty"`
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

	Attempts []Attempt `json:"attempts,omitempty"`
	// Flags lists what the record shows that a hold could not contain or
	// a node should not have done: every attempt's Flags, each opened
	// with "attempt N: ". Absent when there is none.
	Flags  []string   `json:"flags,omitempty"`
	Events []EventRef `json:"events"`
	// EventsDigest commits to the exact stored events the record was built
	// from: "sha256:" and the hex SHA-256 of their event digests (see
	// pkg/chain/SPEC.md), in the order of Events. Absent from a record built
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
	// GPUs are the UUIDs of the devices held, in the order the job saw
	// them; absent when none were, or the node held GPUs by count.
	GPUs []string `json:"gpus,omitempty"`
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
	CPUCoreSeconds   float64 `json:"cpu_core_seconds"`
	MemoryGiBSeconds float64 `json:"memory_gib_seconds"`
	GPUSeconds       float64 `json:"gpu_seconds"`
	// GPUSecondsByDevice is the meter of each device held (Held.GPUs),
	// by UUID: the seconds it was held. GPUSeconds is their sum.
	GPUSecondsByDevice map[string]float64 `json:"gpu_seconds_by_device,omitempty"`
	Usage              events.Usage       `json:"usage"`
	Logs               *events.Logs       `json:"logs,omitempty"`
	// ExpiredAt is when RENT ended the attempt because its node had not
	// reported its stop by its limit plus RENT's grace (the ce-time of
	// HoldExpired): its outcome is then limit_exceeded, and a stop the
	// node reports later is listed in the record's events and changes
	// nothing.
	ExpiredAt *time.Time `json:"expired_at,omitempty"`
	// Signature and SigningKey are the node's signature of its stop and
	// the key that made it, as RunStopped carries them (pkg/chain/NODES.md):
	// `e31 audit` checks them against the card of the node the attempt was
	// held on. Absent when the stop was not signed.
	Signature  string `json:"signature,omitempty"`
	SigningKey string `json:"signing_key,omitempty"`
	// Flags lists, one line each opened with its kind, what the attempt's
	// record shows that its hold could not contain (FlagUsage). Absent
	// when there is none.
	Flags []string `json:"flags,omitempty"`
	// ResumedFrom is the checkpoint save the attempt started from
	// ("<attempt>.<n>", RunStarted's resumed_from); absent on a fresh
	// start.
	ResumedFrom string `json:"resumed_from,omitempty"`
	// Checkpoints are the attempt's checkpoint saves that count (see
	// events.Saves); absent when it saved none.
	Checkpoints *Checkpoints `json:"checkpoints,omitempty"`
}

// Checkpoints sums up one attempt's checkpoint saves (CheckpointSaved).
type Checkpoints struct {
	// Saves is how many saves of the attempt count.
	Saves int `json:"saves"`
	// Bytes is what the last save held; NewBytes what all of them sent to
	// the store, together.
	Bytes    int64 `json:"bytes"`
	NewBytes int64 `json:"new_bytes"`
	// Last names the last save ("<attempt>.<n>"), LastAt is its ce-time
	// and Manifest its folder manifest's digest.
	Last     string    `json:"last"`
	LastAt   time.Time `json:"last_at"`
	Manifest string    `json:"manifest"`
}

// FlagUsage opens a flag of usage a node reported that the attempt's hold
// could not contain. Once the attempt is released, and only if it ran
// isolated (the record's isolation is not none: a node that isolates
// nothing enforces no limit, and its figures include its own), the ledger
// and the audit each flag, apart from each other:
//
//	cpu_seconds   > max(held cpu, 0.01) × held_seconds × (1 + CPUSlack) + CPUSlackSeconds
//	max_rss_bytes > held memory_bytes + MemorySlackBytes
//
// as "usage_beyond_hold: cpu_seconds U > C cpu × S s held" and
// "usage_beyond_hold: max_rss_bytes U > M bytes held" (%g for numbers), a
// dimension held as 0 being left alone. The slack covers the kernel's
// accounting (a CFS period's overrun, page rounding), not a job: a
// sandboxed job is held to its cpu and memory by the kernel. No GPU time
// is measured, so none is flagged.
const (
	FlagUsage        = "usage_beyond_hold"
	CPUSlack         = 0.05
	CPUSlackSeconds  = 1.0
	MemorySlackBytes = 1 << 20
)

// EventRef names one event a record was built from.
type EventRef struct {
	Seq  uint64 `json:"seq"`
	Type string `json:"type"`
	// Digest is "sha256:" and the hex event digest of the stored message
	// (see pkg/chain/SPEC.md): an auditor holding the record can tell whether
	// the event in a copy of the log is the one the record was built from.
	Digest string `json:"digest,omitempty"`
	// SetAside marks a node's event about an attempt that another node
	// held (events.FromHolder): it is in the job's log, and listed, but
	// changed nothing of the record.
	SetAside bool `json:"set_aside,omitempty"`
}

// Over reports whether the job has ended.
func (r *HoldRecord) Over() bool {
	switch r.State {
	case StateReleased, StateRejected, StateCancelled:
		return true
	}
	return false
}
