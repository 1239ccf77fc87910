package ledger

import (
	"fmt"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// usageFlags is what a released attempt's record shows that its hold
// could not contain: more cpu time than its cores for as long as they
// were held, more memory than held (hold.FlagUsage says the rule, which
// the audit implements apart). An attempt that ran without isolation is
// not judged: nothing held it to its request.
func usageFlags(a *hold.Attempt, isolation events.Isolation) []string {
	if isolation == events.IsolationNone {
		return nil
	}
	var out []string
	if cpu := a.Held.CPU; cpu > 0 {
		bound := max(cpu, 0.01)*a.HeldSeconds*(1+hold.CPUSlack) + hold.CPUSlackSeconds
		if a.Usage.CPUSeconds > bound {
			out = append(out, fmt.Sprintf("%s: cpu_seconds %g > %g cpu × %g s held", hold.FlagUsage, a.Usage.CPUSeconds, cpu, a.HeldSeconds))
		}
	}
	if mem := a.Held.MemoryBytes; mem > 0 && a.Usage.MaxRSSBytes > mem+hold.MemorySlackBytes {
		out = append(out, fmt.Sprintf("%s: max_rss_bytes %d > %d bytes held", hold.FlagUsage, a.Usage.MaxRSSBytes, mem))
	}
	return out
}
