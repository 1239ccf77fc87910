package executor

import (
	"errors"
	"time"
)

// Snapshotter is implemented by a Job whose executor can copy its /out as
// it is at one moment while the job runs: RUN saves a job's checkpoint
// from such a copy, so that what it uploads is what the job had written at
// that moment, however long the upload takes. Snapshot may be called from
// another goroutine while Run is under way, never after Release.
type Snapshotter interface {
	// Snapshot stops the job's processes, takes a read-only copy of its
	// writable space, and lets them go on; paused is how long they were
	// stopped. out is the copy's /out, valid until remove is called.
	// ErrNoSnapshot: this job's space has no snapshots (RUN then uploads
	// from the live /out).
	Snapshot() (out string, paused time.Duration, remove func() error, err error)
}

// ErrNoSnapshot is returned by Snapshot where the job's writable space
// cannot be snapshotted (a tmpfs, where the node has no btrfs job disk).
var ErrNoSnapshot = errors.New("executor: the job's writable space has no snapshots")
