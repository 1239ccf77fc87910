package audit_test

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/e31net/e31/pkg/audit"
)

// TuneGC sets the collector for an audit and gives the setting back; an
// operator's GOGC stands.
func TestTuneGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	t.Setenv("GOGC", "") // put back at the end
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	restore := audit.TuneGC()
	if got := debug.SetGCPercent(audit.GCPercent); got != audit.GCPercent {
		t.Errorf("tuned: the collector's target is %d, want %d", got, audit.GCPercent)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("restored: the collector's target is %d, want 100 as before", got)
	}
	t.Setenv("GOGC", "50")
	restore = audit.TuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set the collector's target moved to %d", got)
	}
	restore()
}
