package rent

import "github.com/e31net/e31/pkg/events"

// cancelSweep applies the cancel of a whole sweep (events.SweepCancel):
// every live member of the sweep that by may cancel is marked as if it had
// been asked alone. The pool applies the log's submissions in order, so
// the live members are exactly those submitted before the cancel: a member
// submitted again after it (e31 submit --again) is not one of them.
//
// It looks at every live job rather than keep an index of sweeps: a
// sweep's cancel is rare, a pass over even a hundred thousand queued jobs
// takes milliseconds, and an index would cost every queued job memory.
// A member already held is marked too: RUN stops it (it reads the same
// cancel), and should its attempt be lost, it is cancelled rather than
// held again.
func (p *Pool) cancelSweep(sweep, by string) {
	for id, j := range p.jobs {
		if sw := j.spec.Sweep; sw != nil && sw.ID == sweep && events.MayCancel(by, j.submitter) {
			j.cancel = true
			p.attention[id] = j
		}
	}
}
