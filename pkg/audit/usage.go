package audit

import (
	"fmt"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// beyondHold is what a released attempt reports that its hold could not
// contain, by the rule hold.FlagUsage writes out, derived here apart from
// the ledger's code: the two records must agree, flag for flag. An attempt
// run without isolation is not judged: nothing held it to its request,
// and a plain process's peak memory includes its node's.
func beyondHold(a *hold.Attempt, isolation events.Isolation) []string {
	if isolation == events.IsolationNone {
		return nil
	}
	var flags []string
	held, u := a.Held, a.Usage
	if held.CPU > 0 && u.CPUSeconds > max(held.CPU, 0.01)*a.HeldSeconds*(1+hold.CPUSlack)+hold.CPUSlackSeconds {
		flags = append(flags, fmt.Sprintf("%s: cpu_seconds %g > %g cpu × %g s held", hold.FlagUsage, u.CPUSeconds, held.CPU, a.HeldSeconds))
	}
	if held.MemoryBytes > 0 && u.MaxRSSBytes > held.MemoryBytes+hold.MemorySlackBytes {
		flags = append(flags, fmt.Sprintf("%s: max_rss_bytes %d > %d bytes held", hold.FlagUsage, u.MaxRSSBytes, held.MemoryBytes))
	}
	return flags
}
