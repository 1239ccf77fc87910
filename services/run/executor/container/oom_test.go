//go:build linux

package container

import "testing"

// TestKilledAtLimit: a SIGKILL at the memory limit is the OOM killer's even
// when the engine's flag missed it; the job's own kill -9, or an exit at the
// limit, is not.
func TestKilledAtLimit(t *testing.T) {
	const limit = 48 << 20
	for _, c := range []struct {
		code int
		peak int64
		want bool
		desc string
	}{
		{137, limit + 12288, true, "killed, peak just over the limit (the parent's pages)"},
		{137, limit - 4096, true, "killed, peak a page under the limit"},
		{137, 10 << 20, false, "killed far below the limit: someone's kill -9"},
		{1, limit, false, "an ordinary failure at the limit"},
		{137, 0, false, "usage not measured"},
	} {
		if got := killedAtLimit(c.code, c.peak, limit); got != c.want {
			t.Errorf("%s: killedAtLimit(%d, %d) = %v, want %v", c.desc, c.code, c.peak, got, c.want)
		}
	}
}
