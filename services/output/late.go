package output

import (
	"context"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
)

// expiredBefore reports whether RENT ended the stopped attempt before the
// stop env was stored: HoldExpired, its node having kept quiet past the
// job's limit plus RENT's grace. The stop is then set aside: its output
// is not returned, and the record keeps RENT's end. An honest node never
// stores one so (it reads HoldExpired and records nothing), but the
// meter must not depend on the node's honesty. A stop that lands between
// HoldExpired and the release is found here; one that lands before
// HoldExpired is one RENT could not have expired (its decision expects the
// job's last event). One lookup in the server's index of subjects.
//
// Any error is false: the stop is then handled as any other, and decide
// still sets it aside if the attempt was released meanwhile.
func (s *Service) expiredBefore(ctx context.Context, env events.Envelope, attempt int) bool {
	subject, err := events.SubjectOf(env.Subject, &events.HoldExpired{})
	if err != nil {
		return false
	}
	m, err := bus.Last(ctx, s.js, subject)
	if err != nil || m.Sequence > env.Seq {
		return false
	}
	x, err := events.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		return false
	}
	e, ok := x.Event.(*events.HoldExpired)
	if ok && e.Attempt == attempt {
		s.log.Warn("a stop reported after RENT ended its attempt is set aside: its output is not returned",
			"job", env.Subject, "attempt", attempt, "node", e.Node, "seq", env.Seq, "expired_seq", m.Sequence)
		return true
	}
	return false
}
