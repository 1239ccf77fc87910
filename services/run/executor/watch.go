package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// Signals are how an executor stops a job it started: Term sends every
// process of the job SIGTERM, told why, and Kill SIGKILL. Watch calls
// them on its caller's goroutine, Term at most once; what fails is theirs
// to log.
type Signals struct {
	Term func(why Stop)
	Kill func()
}

// Stop is why e31 stopped a job: its limit or a cancel. The zero Stop is
// none: the job ended by itself, and its exit says how.
type Stop struct {
	Outcome events.Outcome
	Reason  string
}

// Watch waits until the job of spec, started at started, has exited
// (exited delivers) and stops it when e31 must, the same way on every
// executor: SIGTERM a grace before its limit and SIGKILL at it; and when
// ctx ends (a cancel, the node stopping), SIGTERM and SIGKILL a grace
// later, never past the limit's. It returns what exited delivered and why
// e31 stopped the job, if it did; an error when failed (nil: never)
// delivers one first, and then the job may still run.
func Watch[T any](ctx context.Context, spec Spec, started time.Time, exited <-chan T, failed <-chan error, sig Signals) (T, Stop, error) {
	termAt, killAt := spec.Stops(started)
	term, kill := Due(termAt), Due(killAt)
	var stop Stop
	stopping := func(outcome events.Outcome, reason string) {
		if stop.Outcome != "" {
			return
		}
		stop = Stop{Outcome: outcome, Reason: reason}
		sig.Term(stop)
	}
	atLimit := fmt.Sprintf("ran past its limit of %s", spec.Limit)
	done := ctx.Done()
	for {
		select {
		case x := <-exited:
			return x, stop, nil
		case err := <-failed:
			var zero T
			return zero, stop, err
		case <-term:
			term = nil
			stopping(events.LimitExceeded, atLimit)
		case <-done:
			done = nil
			if stop.Outcome == "" {
				stopping(events.Cancelled, "cancelled")
				kill = Due(KillBy(time.Now(), spec.Grace, CancelKill(ctx, killAt)))
			}
		case <-kill:
			kill = nil
			stopping(events.LimitExceeded, atLimit)
			sig.Kill()
		}
	}
}
