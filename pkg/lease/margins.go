package lease

import (
	"fmt"
	"time"
)

// Margins are the two safety margins around a lease's TTL (see the package
// doc for why each is there): Fence, before the TTL, when its owner stops
// acting; Lapse, after the TTL, before the pool counts its owner gone.
type Margins struct {
	Fence time.Duration
	Lapse time.Duration
}

// DefaultMargins are the margins of a lease of the given TTL when the
// operator names none: a quarter of it to fence, a fifth to lapse (2.5 s
// and 2 s of the default 10 s).
func DefaultMargins(ttl time.Duration) Margins {
	return Margins{Fence: ttl / 4, Lapse: ttl / 5}
}

// Or fills in the margins left zero from DefaultMargins(ttl).
func (m Margins) Or(ttl time.Duration) Margins {
	d := DefaultMargins(ttl)
	if m.Fence == 0 {
		m.Fence = d.Fence
	}
	if m.Lapse == 0 {
		m.Lapse = d.Lapse
	}
	return m
}

// Check reports whether the margins are usable with a lease of the given
// TTL, and if not, why.
func (m Margins) Check(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("lease: TTL %s: it must be positive", ttl)
	case m.Fence <= 0:
		return fmt.Errorf("lease: fence margin %s: it must be positive, or a node cut off would stop its jobs no earlier than the pool may hold them again", m.Fence)
	case m.Fence > ttl/2:
		return fmt.Errorf("lease: fence margin %s is over half the lease TTL %s: a node renews every TTL/3, and with less than half the TTL left "+
			"to renew in, one renewal a little late would stop every job on it", m.Fence, ttl)
	case m.Lapse < 0:
		return fmt.Errorf("lease: lapse margin %s: it must not be negative, or the pool could count a node lost before its lease expired", m.Lapse)
	}
	return nil
}

// StopTimes are when an owner that fences for a lease expiring at expiry
// (its last renewal sent plus the TTL, on its own clock) sends SIGTERM and
// SIGKILL to what it runs: Fence before expiry, and half that.
func (m Margins) StopTimes(expiry time.Time) (term, kill time.Time) {
	return expiry.Add(-m.Fence), expiry.Add(-m.Fence / 2)
}
