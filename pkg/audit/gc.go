package audit

import "github.com/e31net/e31/pkg/gctune"

// GCPercent is the collector's target (debug.SetGCPercent) for a process
// that runs one audit, unless its environment says otherwise.
//
// An audit's live heap is small and steady (the open jobs' histories, and
// a tomb of ~200 bytes for each job that ended and is not yet compared),
// while what it allocates per event
// (the message, its headers, the decoded envelope) is dead within the
// microsecond: with Go's default of 100 the collector runs every few
// thousand events and was a quarter of the audit's CPU. At 400 it runs a
// quarter as often, for a heap that peaks at five times what is live
// rather than twice; GOMEMLIMIT, when set, still bounds it.
const GCPercent = 400

// TuneGC sets GCPercent for the process, unless GOGC is set (the
// operator's choice stands), and returns what restores the setting before.
// It is for a process that audits and does little else (`e31 audit`, the
// bench): the setting is the process's, not the auditor's.
func TuneGC() (restore func()) { return gctune.Set(GCPercent) }
