// Package gctune sets the Go collector's target for a process that does
// one kind of work (RENT alone, an audit), whose heap is a steady live part
// and a stream of garbage dead at once: there a higher target marks the
// live part less often for little more memory. The setting is the
// process's, so only a main, or a tool that runs alone, should set it.
package gctune

import (
	"os"
	"runtime/debug"
)

// Set sets the collector's target to percent (debug.SetGCPercent) unless
// GOGC is set, since the operator's choice stands, and returns what
// restores the target before.
func Set(percent int) (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	old := debug.SetGCPercent(percent)
	return func() { debug.SetGCPercent(old) }
}
