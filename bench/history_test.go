package bench

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/natstest"
)

// historySummary is read by scripts: fields may be added at its end, none
// renamed or moved.
var historySummary = regexp.MustCompile(`^history jobs=\d+ ledger_heap_mib=\d+\.\d rent_heap_mib=\d+\.\d output_heap_mib=\d+\.\d ledger_restart_s=(\d+\.\d{3}) rent_restart_s=(\d+\.\d{3}) output_restart_s=(\d+\.\d{3}) ledger_catchup_s=\d+\.\d rent_catchup_s=\d+\.\d output_catchup_s=\d+\.\d ledger_catchup_cpu_s=\d+\.\d rent_catchup_cpu_s=\d+\.\d output_catchup_cpu_s=\d+\.\d total_s=\d+\.\d$`)

// TestHistorySmall runs the history measure small: every service catches
// up and is measured, every restart is timed, and the summary line is
// whole.
func TestHistorySmall(t *testing.T) {
	if testing.Short() {
		t.Skip("writes logs and files")
	}
	ctx := natstest.Context(t, 3*time.Minute)
	var out bytes.Buffer
	if err := History(ctx, &out, HistoryOptions{Jobs: 300}); err != nil {
		t.Fatalf("history: %v\n%s", err, out.String())
	}
	m := historySummary.FindStringSubmatch(lastLine(out.String()))
	if m == nil {
		t.Fatalf("history summary %q does not match %s\n%s", lastLine(out.String()), historySummary, out.String())
	}
	for i, name := range []string{"ledger", "rent", "output"} {
		if s, _ := strconv.ParseFloat(m[i+1], 64); s <= 0 {
			t.Errorf("%s_restart_s=%v: the restart was not timed\n%s", name, s, out.String())
		}
	}
	t.Log(out.String())
}
