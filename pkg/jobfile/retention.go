package jobfile

import (
	"fmt"
	"math"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// Bounds of retention: how long a job's staged data and output are kept
// after it ends. Under a minute nobody could fetch the output; past a year
// the store becomes an archive, which it is not meant to be. Left out, a
// job keeps them for events.DefaultRetention.
const (
	MinRetention = time.Minute
	MaxRetention = 365 * Day
)

const wantRetention = "a duration such as 7d or 12h (how long data and output are kept after the job ends; default 7d)"

// readRetention reads retention: how long the job's staged data and output
// live after it ends. Left out, the spec carries nothing and the default
// applies, so that the default can change without rewriting old specs.
func readRetention(r *reader, v value, j *Job) {
	if !v.given() {
		return
	}
	if sec, ok := r.seconds(v, wantRetention, checkRetention); ok {
		j.Spec.RetentionSeconds = sec
	}
}

// checkRetention takes seconds because that is what a spec carries; 0 means
// the default and is checked by the caller.
func checkRetention(sec float64) string {
	got := formatFloat(sec) + "s"
	if math.Abs(sec) < 1e9 {
		got = formatDuration(time.Duration(sec * float64(time.Second)))
	}
	switch {
	case math.IsNaN(sec) || math.IsInf(sec, 0):
		return "must be a finite number of seconds, got " + formatFloat(sec)
	case sec < MinRetention.Seconds():
		return fmt.Sprintf("must be at least %s, got %s", formatDuration(MinRetention), got)
	case sec > MaxRetention.Seconds():
		return fmt.Sprintf("must be at most %s, got %s", formatDuration(MaxRetention), got)
	}
	return ""
}

// validateRetention is Validate's rule for retention_seconds: absent (0)
// takes the default, anything else must be within bounds.
func validateRetention(spec events.JobSpec, fail func(path, msg string)) {
	if spec.RetentionSeconds == 0 {
		return
	}
	if why := checkRetention(spec.RetentionSeconds); why != "" {
		fail("retention_seconds", why)
	}
}
