package hostile_test

import "testing"

// TestHostileTenant runs every attack of issue 16 in turn against one
// e31, while honest runs jobs beside mallory; each attack ends with its
// aftermath (see aftermath). They share the system on purpose: what one
// attack left behind would show in the next.
func TestHostileTenant(t *testing.T) {
	s := &suite{w: newWatcher(t), mal: newTenant(t, mallory)}
	s.warm = runHonest(t, s.w, "warm-up", "warm-up")
	if t.Failed() {
		t.Fatal("the honest tenant's first job failed before any attack: nothing below would mean anything")
	}
	var at string
	s.baseline, at = s.w.settledConsumers(t)
	t.Logf("before the attacks: %d consumers on the %s stream: %s", s.baseline, logStream, at)

	t.Run("replies", s.replies)
	t.Run("garbage", s.garbage)
	t.Run("msgids", s.msgids)
	t.Run("flood", s.flood)
	t.Run("snooping", s.snooping)
	t.Run("image", s.image)
	t.Run("quotas", s.quotas)
}

// suite is what the attacks share: the operator's view, mallory's
// connection, honest's first job, and the log's consumer count at rest.
type suite struct {
	w    *watcher
	mal  *tenant
	warm honestJob
	// baseline is the log's consumer count with nothing going on, plus
	// any consumers the aftermaths' own audits left behind.
	baseline int
}

// reportForeign fails t with what the log holds that its owner did not
// write, the first few in full.
func reportForeign(t *testing.T, attack string, problems []string) {
	t.Helper()
	const shown = 5
	for i, p := range problems {
		if i == shown {
			t.Errorf("%s: the log holds %d more messages their owners did not write", attack, len(problems)-shown)
			break
		}
		t.Errorf("%s: the log holds what its owner did not write: %s", attack, p)
	}
}
