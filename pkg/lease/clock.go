package lease

import "time"

// Clock is the owner's clock: when a renewal was sent, and the timers of
// renewals and fences. Its Now must carry a monotonic reading, as
// time.Now's does, so that a wall clock stepped by NTP moves no fence.
// Tests give a fake one. Its methods may be called concurrently.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// systemClock is the process's clock.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Option sets how a lease taken by Acquire or Claim is kept.
type Option func(*Lease)

// WithClock makes the lease count time on c (default: the system's).
func WithClock(c Clock) Option {
	return func(l *Lease) {
		if c != nil {
			l.clock = c
		}
	}
}

// OnUnanswered makes a lease kept with KeepFenced call f when a renewal's
// request ran out its deadline unanswered: the connection it went on may
// have gone silent, which the client's pings tell only seconds later. f
// must not block; a node makes its client reconnect at once.
func OnUnanswered(f func()) Option {
	return func(l *Lease) { l.unanswered = f }
}
