package jobfile

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// The checkpoint: a folder under /out that the node saves while the job
// runs and restores for a later attempt (events.CheckpointSpec).

// Bounds of checkpoint.every: a save more often than every second would
// spend the node on hashing rather than on the job; one less often than
// the longest limit would never happen.
const (
	MinCheckpointEvery = time.Second
	MaxCheckpointEvery = MaxLimit
)

const (
	wantCheckpoint      = "a mapping with path (a folder under /out) and every (a duration such as 10m)"
	wantCheckpointPath  = "a folder under /out such as ckpt"
	wantCheckpointEvery = "a duration such as 10m (how often the folder is saved while the job runs; at least 1s)"
)

// checkpointEntry is the checkpoint: mapping while it is read.
type checkpointEntry struct {
	spec events.CheckpointSpec
}

var checkpointFields = []field[checkpointEntry]{
	{"path", readCheckpointPath},
	{"every", readCheckpointEvery},
}

func readCheckpoint(r *reader, v value, j *Job) {
	if !v.given() {
		return
	}
	var c checkpointEntry
	if !readObject(r, v, checkpointFields, &c, wantCheckpoint) {
		return
	}
	if c.spec.Path != "" && c.spec.EverySeconds > 0 {
		j.Spec.Checkpoint = &c.spec
	}
}

func readCheckpointPath(r *reader, v value, c *checkpointEntry) {
	if !v.given() {
		r.fail(v, "required ("+wantCheckpointPath+")")
		return
	}
	s, ok := r.text(v, wantCheckpointPath)
	if !ok {
		return
	}
	if why := checkCheckpointPath(s); why != "" {
		r.fail(v, why)
		return
	}
	c.spec.Path = s
}

func readCheckpointEvery(r *reader, v value, c *checkpointEntry) {
	if !v.given() {
		r.fail(v, "required ("+wantCheckpointEvery+")")
		return
	}
	if sec, ok := r.seconds(v, wantCheckpointEvery, checkCheckpointEvery); ok {
		c.spec.EverySeconds = sec
	}
}

// checkCheckpointPath is what an output path must be (under /out, relative,
// clean, no ".."), and a folder name rather than a glob: it names one
// folder, saved and restored whole.
func checkCheckpointPath(p string) string {
	if why := checkOutputPath(p); why != "" {
		return strings.ReplaceAll(why, wantOutput, wantCheckpointPath)
	}
	if strings.ContainsAny(p, `*?[\`) {
		return fmt.Sprintf("%s must name one folder, not a glob (no *, ?, [ or \\)", quote(p))
	}
	return ""
}

// checkCheckpointEvery takes seconds because that is what a spec carries.
func checkCheckpointEvery(sec float64) string {
	got := formatFloat(sec) + "s"
	if math.Abs(sec) < 1e9 {
		got = formatDuration(time.Duration(sec * float64(time.Second)))
	}
	switch {
	case math.IsNaN(sec) || math.IsInf(sec, 0):
		return "must be a finite number of seconds, got " + formatFloat(sec)
	case sec < MinCheckpointEvery.Seconds():
		return fmt.Sprintf("must be at least %s, got %s", formatDuration(MinCheckpointEvery), got)
	case sec > MaxCheckpointEvery.Seconds():
		return fmt.Sprintf("must be at most %s, got %s", formatDuration(MaxCheckpointEvery), got)
	}
	return ""
}

// validateCheckpoint is Validate's rule for checkpoint.
func validateCheckpoint(spec events.JobSpec, fail func(path, msg string)) {
	c := spec.Checkpoint
	if c == nil {
		return
	}
	if why := checkCheckpointPath(c.Path); why != "" {
		fail("checkpoint.path", why)
	}
	if why := checkCheckpointEvery(c.EverySeconds); why != "" {
		fail("checkpoint.every_seconds", why)
	}
}
