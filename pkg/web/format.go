package web

import (
	"fmt"
	"strconv"
	"time"

	"github.com/e31net/e31/pkg/events"
)

func itoa(n int) string { return strconv.Itoa(n) }

// bytesText is a size in the units a person reads (KiB, MiB, GiB).
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// holdText says what one attempt holds.
func holdText(h events.Hold) string {
	s := fmt.Sprintf("attempt %d on %s: %s cpu, %s", h.Attempt, h.Node, strconv.FormatFloat(h.CPU, 'f', -1, 64), bytesText(h.MemoryBytes))
	if h.GPU > 0 {
		s += fmt.Sprintf(", %d gpu", h.GPU)
	}
	return s
}

// clock is a time as the page shows it: UTC, to the millisecond.
func clock(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

// ago is how long before now t was, roughly.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String() + " ago"
}
