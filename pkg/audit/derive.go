package audit

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"slices"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// phase is where a job is in its life, for the order check.
type phase int

const (
	unrequested phase = iota // nothing yet but, perhaps, a request to cancel or delete
	requested
	waiting // submitted, or released to be held again
	holding // an attempt is held
	over
)

func (p phase) String() string {
	return [...]string{"had not been requested", "had not been submitted", "was waiting", "was held", "was over"}[p]
}

// step is where an attempt is in its life.
type step int

const (
	held step = iota + 1
	started
	stopped
	lost    // HoldLost: only the release may follow
	expired // HoldExpired: only the release may follow; a stop is set aside
	returned
	released
)

func (s step) String() string {
	return [...]string{"", "held", "started", "stopped", "lost", "ended by RENT at its limit plus grace", "returned", "released"}[s]
}

// attempt is one attempt being rebuilt.
type attempt struct {
	a      hold.Attempt
	step   step
	hold   events.Hold // as ComputeHeld gave it
	heldAt uint64      // sequence of the ComputeHeld
	// expiredAt is the sequence of RENT's HoldExpired, or 0.
	expiredAt uint64
	// end is the fact that ended the attempt in time (see ended), nil
	// before it.
	end *fact
}

// ended notes f as the end of the attempt in time, unless one came
// before: the attempt runs from its ComputeHeld to the first of its
// RunStopped (its node stopped it) or HoldLost (RENT gave it up with its
// node), or, with neither, its ComputeReleased.
func (at *attempt) ended(f *fact) {
	if at.end == nil {
		at.end = f
	}
}

// meter is what the attempt held times how long: held seconds and
// resource-time, from ComputeHeld's ce-time to ComputeReleased's.
func (at *attempt) meter(releasedAt time.Time) {
	s := releasedAt.Sub(*at.a.HeldAt).Seconds()
	at.a.HeldSeconds = s
	at.a.CPUCoreSeconds = at.a.Held.CPU * s
	at.a.MemoryGiBSeconds = float64(at.a.Held.MemoryBytes) / (1 << 30) * s
	at.a.GPUSeconds = float64(at.a.Held.GPU) * s
	// Each device held is held the whole attempt.
	if len(at.a.Held.GPUs) > 0 {
		at.a.GPUSecondsByDevice = map[string]float64{}
		for _, u := range at.a.Held.GPUs {
			at.a.GPUSecondsByDevice[u] = s
		}
	}
}

// derived is one job's record rebuilt from its history, and what is wrong
// with the history.
type derived struct {
	rec      *hold.HoldRecord
	findings []Finding
	// setAside counts the facts set aside: requests after the first.
	setAside int
	// end is the fact that ended the job, nil while it is not over.
	end *fact
}

// derive builds one job's record from its history so far and checks the
// history against the life of a job.
//
// unreadableAt, when not 0, is where the job's first request is, which
// could not be read. Without list, the record does not list its events
// (nor their digest): a record that is checked and let go of needs
// neither, and writing each digest out is a good part of the cost.
func derive(jobID string, facts []fact, unreadableAt uint64, list bool, sweeps sweepCancels) derived {
	var findings []Finding
	setAside := 0
	bad := func(f fact, kind, format string, args ...any) {
		findings = append(findings, Finding{Job: jobID, Seq: f.seq, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	rec := &hold.HoldRecord{Job: jobID, State: hold.StateSubmitted, Output: hold.Output{Missing: []string{}}}
	var sum hash.Hash
	if list {
		rec.Events, sum = make([]hold.EventRef, 0, len(facts)), sha256.New()
	}
	// The attempts held, in the order they were: a job has one, and at
	// most a few (events.MaxAttempts), so they are looked up by number
	// along the list rather than through a map made for every job.
	var attempts []*attempt
	ph := unrequested
	last := 0 // the highest attempt held
	var cancelAsked bool
	var end *fact
	var endOutcome events.Outcome
	var endReason string
	// saved names the checkpoint saves that count so far ("<attempt>.<n>"),
	// which a later attempt may resume from.
	saved := map[string]bool{}

	for i := range facts {
		f := facts[i]
		if ph == unrequested && unreadableAt != 0 && f.seq > unreadableAt {
			// Its first request was published but cannot be read: SUBMIT
			// answers it with a rejection, as it would an invalid one.
			ph = requested
		}
		// A repeated request under a used id is refused by SUBMIT and is no
		// part of the job.
		if f.repeat && f.typ == events.TypeJobRequested {
			setAside++
			continue
		}
		aside := f.foreign
		if c, ok := f.ev.(*events.CheckpointSaved); ok && !f.foreign && !f.repeat {
			// A save counts only while its attempt runs, from its start to
			// whatever ended it: one after is a node's word too late, set
			// aside, as the ledger sets it aside.
			var at *attempt
			for _, a := range attempts {
				if a.a.Attempt == c.Attempt {
					at = a
				}
			}
			if at == nil || at.step != started {
				aside = true
				setAside++
				was := "never held"
				if at != nil {
					was = at.step.String()
				}
				bad(f, Order, "CheckpointSaved %d.%d outside its attempt's run (attempt %d was %s): set aside", c.Attempt, c.N, c.Attempt, was)
			}
		}
		if list {
			rec.Events = append(rec.Events, hold.EventRef{Seq: f.seq, Type: events.Name(f.typ), Digest: digestText(f.digest[:]), SetAside: aside})
			sum.Write(f.digest[:])
		}
		if f.repeat || aside {
			continue
		}
		name := events.Name(f.typ)
		if ph == over && !isRequest(f.typ) && !events.AfterEnd(f.ev) {
			bad(f, Order, "%s after the job ended with %s at #%d", name, events.Name(end.typ), end.seq)
		}
		t := f.at
		if h, ok := events.HoldOf(f.ev); ok {
			var at *attempt
			for _, a := range attempts {
				if a.a.Attempt == h.Attempt {
					at = a
					break
				}
			}
			if at == nil {
				if f.typ != events.TypeComputeHeld {
					bad(f, Order, "%s for attempt %d, which was never held", name, h.Attempt)
				}
				at = &attempt{a: hold.Attempt{Attempt: h.Attempt}}
				attempts = append(attempts, at)
			} else if at.step >= held && !sameHold(h, at.hold) {
				bad(f, Inconsistent, "%s for attempt %d names node %s with %g cpu, %d bytes, %d gpu %v, %d disk, but it was held on %s with %g cpu, %d bytes, %d gpu %v, %d disk at #%d",
					name, h.Attempt, h.Node, h.CPU, h.MemoryBytes, h.GPU, h.GPUs, h.DiskBytes,
					at.hold.Node, at.hold.CPU, at.hold.MemoryBytes, at.hold.GPU, at.hold.GPUs, at.hold.DiskBytes, at.heldAt)
			}
			// may lists the steps an event may follow.
			may := func(next step, after ...step) {
				ok := false
				for _, s := range after {
					ok = ok || at.step == s
				}
				if !ok && at.step != 0 {
					bad(f, Order, "%s for attempt %d, which was %s", name, h.Attempt, at.step)
				}
				if next > at.step {
					at.step = next
				}
			}
			switch ev := f.ev.(type) {
			case *events.ComputeHeld:
				if at.step != 0 {
					bad(f, Order, "attempt %d held again (first at #%d)", h.Attempt, at.heldAt)
					break
				}
				if ph != waiting {
					bad(f, Order, "attempt %d held while the job %s", h.Attempt, ph)
				}
				if h.Attempt != last+1 {
					bad(f, Order, "attempt %d held after attempt %d", h.Attempt, last)
				}
				for _, prev := range attempts {
					if prev != at && prev.end != nil && f.stored.Before(prev.end.stored) {
						bad(f, Overlap, "attempt %d held at %s, %s before attempt %d ended with %s at #%d (%s): by the stream's own times, the two overlap",
							h.Attempt, f.stored.Format(time.RFC3339Nano), prev.end.stored.Sub(f.stored), prev.a.Attempt, events.Name(prev.end.typ), prev.end.seq,
							prev.end.stored.Format(time.RFC3339Nano))
					}
				}
				at.step, at.hold, at.heldAt = held, h, f.seq
				at.a.Node, at.a.HeldAt = ev.Node, &t
				at.a.Held = hold.Resources{CPU: ev.CPU, MemoryBytes: ev.MemoryBytes, GPU: ev.GPU, DiskBytes: ev.DiskBytes, GPUs: ev.GPUs}
				last = max(last, h.Attempt)
				ph = holding
				rec.State = hold.StateHeld
			case *events.RunStarted:
				may(started, held)
				at.a.StartedAt = &t
				at.a.ResumedFrom = ev.ResumedFrom
				if ev.ResumedFrom != "" && !saved[ev.ResumedFrom] {
					bad(f, Inconsistent, "attempt %d resumed from checkpoint save %s, which no earlier attempt saved", h.Attempt, ev.ResumedFrom)
				}
				rec.Isolation = ev.Isolation // the last start's, in log order
				rec.State = hold.StateRunning
			case *events.RunStopped:
				if at.expiredAt != 0 {
					// The node reported after RENT ended the attempt: set
					// aside, and a finding, since an honest node records
					// no stop once it reads the end.
					bad(f, Order, "RunStopped for attempt %d after RENT ended it at its limit plus grace at #%d: set aside", h.Attempt, at.expiredAt)
					break
				}
				may(stopped, held, started)
				at.ended(&facts[i])
				at.a.StoppedAt = &t
				at.a.ExitCode, at.a.Usage, at.a.Outcome, at.a.Reason, at.a.Logs = ev.ExitCode, ev.Usage, ev.Outcome, ev.Reason, ev.Logs
				at.a.Signature, at.a.SigningKey = ev.Signature, ev.SigningKey
				rec.State = hold.StateStopped
			case *events.CheckpointSaved:
				// Only a save that counts comes here (see above).
				if at.a.HeldAt != nil && t.Before(*at.a.HeldAt) {
					bad(f, Clock, "checkpoint save %d.%d at %s, %s before its attempt was held at #%d", ev.Attempt, ev.N,
						t.Format(time.RFC3339Nano), at.a.HeldAt.Sub(t), at.heldAt)
				}
				name := fmt.Sprintf("%d.%d", ev.Attempt, ev.N)
				saved[name] = true
				c := at.a.Checkpoints
				if c == nil {
					c = &hold.Checkpoints{}
					at.a.Checkpoints = c
				}
				c.Saves++
				c.Bytes = ev.Bytes
				c.NewBytes += ev.NewBytes
				c.Last, c.LastAt, c.Manifest = name, t, ev.Manifest
			case *events.HoldExpired:
				may(expired, held, started)
				at.expiredAt = f.seq
				at.a.ExpiredAt = &t
				at.a.Outcome, at.a.Reason = events.LimitExceeded, ev.Reason
				rec.State = hold.StateStopped
			case *events.HoldLost:
				may(lost, held, started)
				at.ended(&facts[i])
				at.a.Outcome, at.a.Reason = events.NodeLost, ev.Reason
				rec.State = hold.StateStopped
			case *events.OutputReturned:
				may(returned, stopped)
				at.a.OutputReturnedAt = &t
				at.a.Outcome = ev.Outcome
				if ev.Reason != "" {
					at.a.Reason = ev.Reason
				}
				missing := ev.Missing
				if missing == nil {
					missing = []string{}
				}
				rec.Output = hold.Output{Files: ev.FileCount(), Bytes: ev.Bytes, Partial: ev.Partial, Missing: missing, List: ev.Files, Manifest: ev.Manifest}
				rec.State = hold.StateReturned
			case *events.ComputeReleased:
				if at.step == released {
					bad(f, Order, "attempt %d released again", h.Attempt)
					break
				}
				may(released, returned, lost, expired)
				at.ended(&facts[i])
				at.a.ReleasedAt = &t
				if at.a.HeldAt != nil {
					at.meter(t)
					for _, flag := range beyondHold(&at.a, rec.Isolation) {
						at.a.Flags = append(at.a.Flags, flag)
						bad(f, UsageBeyondHold, "attempt %d on node %s reports %s", h.Attempt, at.a.Node, flag)
					}
					if t.Before(*at.a.HeldAt) {
						bad(f, Clock, "attempt %d released at %s, %s before it was held at #%d", h.Attempt,
							t.Format(time.RFC3339Nano), at.a.HeldAt.Sub(t), at.heldAt)
					}
				}
				if at.a.Outcome == "" {
					at.a.Outcome = ev.Outcome
				}
				rec.State = hold.StateWaiting
				if ph == holding {
					ph = waiting
				}
				if ev.Final {
					rec.State, ph, end = hold.StateReleased, over, &facts[i]
				}
			}
			continue
		}
		switch ev := f.ev.(type) {
		case *events.JobRequested:
			if ph != unrequested {
				// Only the first request says what was asked (as in the
				// ledger): anyone may publish another under the job's id,
				// on its own tail, and it changes nothing. It is listed,
				// as the ledger lists it, and set aside.
				setAside++
			} else {
				ph = requested
				rec.Submitter, rec.Name, rec.Request, rec.Sweep = ev.Submitter, ev.Spec.Name, requestOf(ev.Spec), ev.Spec.Sweep
			}
		case *events.JobSubmitted:
			if ph != requested {
				bad(f, Order, "submitted, but the job %s", ph)
			}
			if ph < waiting {
				ph = waiting
			}
			rec.Submitter, rec.Name, rec.Request, rec.Sweep = ev.Submitter, ev.Spec.Name, requestOf(ev.Spec), ev.Spec.Sweep
			rec.SubmittedAt, rec.State = &t, hold.StateWaiting
		case *events.JobRejected:
			if ph != requested && ph != waiting {
				bad(f, Order, "rejected, but the job %s", ph)
			}
			rec.State, ph, end = hold.StateRejected, over, &facts[i]
			endOutcome, endReason = events.Rejected, ev.Reason
		case *events.JobCancelled:
			if ph != requested && ph != waiting {
				bad(f, Order, "cancelled, but the job %s", ph)
			}
			if !cancelAsked && !sweeps.asked(rec, f.seq) {
				bad(f, Order, "cancelled, but nobody asked to cancel it")
			}
			rec.State, ph, end = hold.StateCancelled, over, &facts[i]
			endOutcome, endReason = events.Cancelled, ev.Reason
		case *events.CancelRequested:
			cancelAsked = true
		case *events.Deleted:
			if ev.What == events.WhatOutput {
				rec.Output.DeletedAt = &t
			} else {
				rec.DataDeletedAt = &t
			}
		}
	}
	if list && len(rec.Events) > 0 {
		rec.EventsDigest = digestText(sum.Sum(nil))
	}
	if rec.State == hold.StateRejected || rec.State == hold.StateCancelled || (len(attempts) == 0 && endOutcome != "") {
		rec.Outcome, rec.Reason = endOutcome, endReason
	}
	for _, at := range attempts {
		rec.Attempts = append(rec.Attempts, at.a)
		for _, flag := range at.a.Flags {
			rec.Flags = append(rec.Flags, fmt.Sprintf("attempt %d: %s", at.a.Attempt, flag))
		}
		rec.HeldSeconds += at.a.HeldSeconds
		if at.a.Outcome == events.NodeLost {
			rec.LostSeconds += at.a.HeldSeconds
		}
		rec.CPUCoreSeconds += at.a.CPUCoreSeconds
		rec.MemoryGiBSeconds += at.a.MemoryGiBSeconds
		rec.GPUSeconds += at.a.GPUSeconds
		if ph == over && at.a.HeldAt != nil && at.a.ReleasedAt == nil {
			findings = append(findings, Finding{Job: jobID, Seq: at.heldAt, Kind: Unreleased, Detail: fmt.Sprintf(
				"attempt %d on %s was held at #%d and never released, but the job ended at #%d", at.a.Attempt, at.a.Node, at.heldAt, end.seq)})
		}
	}
	if n := len(rec.Attempts); n > 0 {
		lastA := rec.Attempts[n-1]
		rec.Node, rec.HeldAt, rec.StartedAt, rec.StoppedAt = lastA.Node, lastA.HeldAt, lastA.StartedAt, lastA.StoppedAt
		rec.OutputReturnedAt, rec.ReleasedAt, rec.Usage, rec.ExitCode = lastA.OutputReturnedAt, lastA.ReleasedAt, lastA.Usage, lastA.ExitCode
		rec.Logs = lastA.Logs
		if rec.State != hold.StateRejected && rec.State != hold.StateCancelled {
			rec.Outcome, rec.Reason = lastA.Outcome, lastA.Reason
		}
	}
	if ph != over {
		end = nil
	}
	return derived{rec: rec, findings: findings, setAside: setAside, end: end}
}

// requestOf is the record's request, from the job's declaration. The
// ledger has its own, deliberately: what goes into a record is derived
// here apart from the ledger's projection, so that one mistake cannot
// agree with itself.
func requestOf(s events.JobSpec) hold.Request {
	return hold.Request{CPU: s.Request.CPU, MemoryBytes: s.Request.MemoryBytes, GPU: s.Request.GPU, DiskBytes: s.Request.DiskBytes, LimitSeconds: s.Request.LimitSeconds}
}

// sameHold reports whether two events name the same attempt and resources,
// the devices and their order included. Written here rather than taken
// from the ledger or pkg/events: the audit shares no code that decides.
func sameHold(a, b events.Hold) bool {
	return a.Attempt == b.Attempt && a.Node == b.Node && a.CPU == b.CPU && a.MemoryBytes == b.MemoryBytes &&
		a.GPU == b.GPU && a.DiskBytes == b.DiskBytes && slices.Equal(a.GPUs, b.GPUs)
}
