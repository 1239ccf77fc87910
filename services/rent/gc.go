package rent

import "github.com/e31net/e31/pkg/gctune"

// GCPercent is the collector's target (debug.SetGCPercent) that a process
// running RENT alone runs with, unless its environment says otherwise.
//
// RENT's heap is mostly its queue: every waiting job, live for as long as
// it waits. What it allocates per decision (the messages it reads and
// appends, their headers and envelopes, some 20 KiB) is dead within the
// millisecond. With Go's default of 100 the collector marks the whole queue
// again each time that much garbage is made: with a hundred thousand jobs
// queued, every few thousand decisions. At 400 it marks a quarter as often,
// for a heap that peaks at five times what is live rather than twice. In
// `e31 bench scheduler` (2 cores, shared) the collector's cpu over a run
// fell from 3.7 s to 0.9 s and the rebuild was about a quarter faster;
// decisions per second rose a little, within the noise, since a larger
// heap is colder in the caches. GOMEMLIMIT, when set, still bounds the
// heap: near the limit the collector runs as often as it must.
const GCPercent = 400

// TuneGC sets GCPercent for the process, unless GOGC is set (the
// operator's choice stands), and returns what restores the setting before.
// It is for a main that runs RENT alone: the setting is the process's.
func TuneGC() (restore func()) { return gctune.Set(GCPercent) }
