package run

import (
	"testing"
	"time"
)

// TestOutputIsCollectedWithinTheHoldsGrace: a node stops collecting a
// job's output in time for its stop to be stored before RENT's grace past
// the limit runs out, or what it collected would be set aside as late.
func TestOutputIsCollectedWithinTheHoldsGrace(t *testing.T) {
	t.Parallel()
	held := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	limit := 10 * time.Minute
	for _, c := range []struct {
		name  string
		now   time.Time
		grace float64
		want  time.Time
	}{
		{"a hold older than its grace: ten minutes", held.Add(time.Minute), 0, held.Add(11 * time.Minute)},
		{"a job that ended early: ten minutes", held.Add(time.Minute), 3600, held.Add(11 * time.Minute)},
		{"a job stopped at its limit: the grace less a tenth", held.Add(limit), 60, held.Add(limit + 54*time.Second)},
		{"a short grace: less two seconds", held.Add(limit), 10, held.Add(limit + 8*time.Second)},
	} {
		if got := reportBy(c.now, held, limit, c.grace); !got.Equal(c.want) {
			t.Errorf("%s: collect until %s, want %s", c.name, got.Format(time.TimeOnly), c.want.Format(time.TimeOnly))
		}
	}
}
