package events

import (
	"strconv"
)

// A checkpoint is a job's saved work: the folder a job declared
// (JobSpec.Checkpoint, under /out) stored as a folder manifest in its
// submitter's store. The node the attempt runs on saves it every
// CheckpointSpec.EverySeconds while the job runs and once more whenever
// the job stops on a node that survives, each time appending
// CheckpointSaved. A later attempt of the same job finds the last accepted
// save restored at the same path before it starts, and a later job may
// stage it (DataRef.CheckpointOf).
//
// A save is the node's word about its attempt, like a start or a stop: it
// is stored on a subject that ends with the node (e31.job.<job>.saved.<node>)
// and counts only from the node the attempt was held on (FromHolder). It
// counts only while the attempt is running, too: a save stored after the
// attempt's stop, loss, expiry or release is set aside by every reader
// (SaveAccepted), so that a node that was cut off, and whose attempt was
// given up as lost and held again elsewhere, cannot change what the next
// attempt resumes from.

// CheckpointSpec is what a job declares of its checkpoint: the folder under
// /out that is saved, and how often while the job runs.
type CheckpointSpec struct {
	// Path is the folder, relative to /out, clean, without "..".
	Path string `json:"path"`
	// EverySeconds is how often it is saved while the job runs, at least
	// MinCheckpointEvery.
	EverySeconds float64 `json:"every_seconds"`
}

// MinCheckpointEvery is the least EverySeconds a spec may ask for: a save
// more often would spend the node on hashing rather than the job.
const MinCheckpointEvery = 1.0

// Why a checkpoint was saved (CheckpointSaved.Trigger).
const (
	// TriggerEvery is the periodic save while the job runs.
	TriggerEvery = "every"
	// TriggerStop is the save once the job stopped (its limit, a cancel,
	// out of memory, its own exit) on a node that survives.
	TriggerStop = "stop"
	// TriggerShutdown is the save once the job was stopped because its
	// node was told to stop (SIGTERM).
	TriggerShutdown = "shutdown"
)

// CheckpointSaved records that the node holding an attempt stored the
// job's checkpoint folder. N counts the attempt's saves from 1; the id is
// <job>/saved/<attempt>.<n>, so a save published twice is stored once.
type CheckpointSaved struct {
	Hold
	// N is this save's number within its attempt, from 1.
	N int `json:"n"`
	// Path is the folder saved, relative to /out (the spec's).
	Path string `json:"path"`
	// Manifest is the digest of the stored folder manifest: what a later
	// attempt restores.
	Manifest string `json:"manifest"`
	// Files and Bytes are what the folder held.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// NewBytes is what this save sent to the store: what it did not hold
	// already (content addressed, to the 16 MiB part).
	NewBytes int64 `json:"new_bytes"`
	// Trigger is why it was saved: TriggerEvery, TriggerStop or
	// TriggerShutdown.
	Trigger string `json:"trigger"`
}

func (c CheckpointSaved) what() string {
	return strconv.Itoa(c.Attempt) + "." + strconv.Itoa(c.N)
}

// SaveName is how a save is named to the job ($E31_RESUMED_FROM) and in the
// hold record: "<attempt>.<n>".
func (c CheckpointSaved) SaveName() string { return c.what() }

// Saves follows one job's events in log order and tells which saves
// count: a save must come from the node its attempt was held on, after the
// attempt's start, and before anything that ended the attempt (its stop,
// HoldLost, HoldExpired, ComputeReleased). Readers set aside a save it
// refuses. The zero value is ready; it is not safe for concurrent use.
type Saves struct {
	attempts map[int]*attemptSaves
}

type attemptSaves struct {
	node           string
	started, ended bool
}

// Accept takes the job's next event and, for a CheckpointSaved, reports
// whether it counts; for any other event it notes what it says of its
// attempt and returns false.
func (s *Saves) Accept(ev Event) bool {
	h, ok := HoldOf(ev)
	if !ok {
		return false
	}
	if s.attempts == nil {
		s.attempts = map[int]*attemptSaves{}
	}
	a := s.attempts[h.Attempt]
	if a == nil {
		a = &attemptSaves{}
		s.attempts[h.Attempt] = a
	}
	switch ev := ev.(type) {
	case *ComputeHeld:
		a.node = ev.Node
	case *RunStarted:
		a.started = a.started || ev.Node == a.node
	case *RunStopped:
		a.ended = a.ended || ev.Node == a.node
	case *HoldLost, *HoldExpired, *ComputeReleased:
		a.ended = true
	case *CheckpointSaved:
		return a.started && !a.ended && ev.Node == a.node
	}
	return false
}

// LastCheckpoint is the last save of any attempt in the job's history that
// counts (Saves), and false when there is none.
func LastCheckpoint(history []Envelope) (*CheckpointSaved, bool) {
	var s Saves
	var last *CheckpointSaved
	for _, e := range history {
		if s.Accept(e.Event) {
			last = e.Event.(*CheckpointSaved)
		}
	}
	return last, last != nil
}

// CountedAttempts is how many of the job's attempts count towards
// MaxAttempts, as its history says: every attempt held, but for one that
// was lost with its node (HoldLost, or a stop or release node_lost) after
// it saved a checkpoint that counts (Saves) and holds something else than
// the save it resumed from. Such an attempt moved the job on: losing it
// cost the job nothing it must be stopped for. AttemptsCap still bounds
// the attempts in all.
func CountedAttempts(history []Envelope) int {
	type state struct{ held, lost, progressed bool }
	var saves Saves
	manifests := map[string]string{} // save name → manifest
	resumed := map[int]string{}      // attempt → the manifest it resumed from
	attempts := map[int]*state{}
	at := func(n int) *state {
		if attempts[n] == nil {
			attempts[n] = &state{}
		}
		return attempts[n]
	}
	for _, e := range history {
		accepted := saves.Accept(e.Event)
		switch ev := e.Event.(type) {
		case *ComputeHeld:
			at(ev.Attempt).held = true
		case *RunStarted:
			if ev.ResumedFrom != "" {
				resumed[ev.Attempt] = manifests[ev.ResumedFrom]
			}
		case *CheckpointSaved:
			if accepted {
				manifests[ev.SaveName()] = ev.Manifest
				if ev.Manifest != resumed[ev.Attempt] {
					at(ev.Attempt).progressed = true
				}
			}
		case *HoldLost:
			at(ev.Attempt).lost = true
		case *RunStopped:
			if ev.Outcome == NodeLost {
				at(ev.Attempt).lost = true
			}
		case *ComputeReleased:
			if ev.Outcome == NodeLost {
				at(ev.Attempt).lost = true
			}
		}
	}
	n := 0
	for _, a := range attempts {
		if a.held && !(a.lost && a.progressed) {
			n++
		}
	}
	return n
}
