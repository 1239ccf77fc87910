package run

import "time"

// Deadline is when a job held at heldAt with the given limit is killed: the
// limit after the hold, as the meter counts. heldAt is the hold's ce-time,
// from the clock of the RENT that held it; a node whose clock is behind
// would count the limit from a moment in its future, so the deadline is
// never later than the limit from now, the moment the node reads the hold.
func Deadline(heldAt time.Time, limit time.Duration, now time.Time) time.Time {
	if heldAt.IsZero() || heldAt.After(now) {
		heldAt = now
	}
	return heldAt.Add(limit)
}

// maxCollect bounds how long a node collects a job's output.
const maxCollect = 10 * time.Minute

// reportBy is when the node must be done collecting a job's output, now
// that the job is over: within maxCollect, and before RENT's grace past
// the limit runs out (counted from heldAt, the hold's ce-time, on RENT's
// clock), less a margin for the stop's append and for the two clocks'
// drift: a tenth of the grace, at least two seconds. A hold that names no
// grace (older than it) has maxCollect.
func reportBy(now, heldAt time.Time, limit time.Duration, graceSeconds float64) time.Time {
	by := now.Add(maxCollect)
	if graceSeconds <= 0 {
		return by
	}
	grace := time.Duration(graceSeconds * float64(time.Second))
	end := heldAt.Add(limit + grace - max(grace/10, 2*time.Second))
	if end.Before(by) {
		return end
	}
	return by
}
