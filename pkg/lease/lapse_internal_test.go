package lease

import (
	"testing"
	"time"
)

// TestALapseIsToldByWhenTheRenewalEnded: Keep calls regained when a
// renewal that succeeded ends half a TTL or more after the renewal before
// it, however valid the lease was when the renewal began: one that waited
// seconds on a lost server began valid and ended after a gap in which the
// owner did not act (the cluster test's scheduler then stood still).
func TestALapseIsToldByWhenTheRenewalEnded(t *testing.T) {
	const ttl = 6 * time.Second
	now := time.Now()
	for _, c := range []struct {
		since time.Duration // from the renewal before to the last one
		want  bool
	}{
		{ttl / 3, false},                  // on time
		{ttl/2 - time.Millisecond, false}, // late, but never invalid
		{ttl / 2, true},                   // invalid from this moment
		{ttl/3 + 4*time.Second, true},     // begun valid, ended after a long wait
	} {
		l := &Lease{ttl: ttl, renewed: now}
		if got := l.lapsedSince(now.Add(-c.since)); got != c.want {
			t.Errorf("renewed %s after the renewal before: lapsed %v, want %v", c.since, got, c.want)
		}
	}
}
