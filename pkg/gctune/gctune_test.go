package gctune_test

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/e31net/e31/pkg/gctune"
)

// Set sets the collector's target and gives the one before back; an
// operator's GOGC stands.
func TestSet(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	t.Setenv("GOGC", "") // put back at the end
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	restore := gctune.Set(400)
	if got := debug.SetGCPercent(400); got != 400 {
		t.Errorf("tuned: the collector's target is %d, want %d", got, 400)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("restored: the collector's target is %d, want 100 as before", got)
	}
	t.Setenv("GOGC", "50")
	restore = gctune.Set(400)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set the collector's target moved to %d", got)
	}
	restore()
}
