package retry

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Policy is how one use tries again: a pause after the first failure that
// grows twofold after each one up to Max, each pause drawn at random within
// Jitter of its value, for at most For (0: as long as the context lasts).
type Policy struct {
	// First is the pause after the first failure.
	First time.Duration
	// Max caps every pause.
	Max time.Duration
	// For is how long to keep trying, from the first try; 0 is for ever.
	For time.Duration
}

// jitter is how far a pause may be from its nominal value, as a fraction
// of it: enough that the services a server restart failed at once do not
// come back at once.
const jitter = 0.2

// BackOff is the policy's sequence of pauses, for loops that wait for more
// than the next pause (RENT's scheduler also wakes on new events). Reset
// it after a success.
func (p Policy) BackOff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{InitialInterval: p.First, RandomizationFactor: jitter, Multiplier: 2, MaxInterval: p.Max}
	b.Reset()
	return b
}

// Option changes one call of Do.
type Option func(*options)

type options struct {
	retryable func(error) bool
	notify    func(err error, in time.Duration)
}

// If tries again when retryable(err) holds, instead of when the error is
// Transient: for an operation whose failures all pass (a pass of a
// scheduler that must go on), or that knows more (a stream missing while a
// cluster restarts).
func If(retryable func(error) bool) Option {
	return func(o *options) { o.retryable = retryable }
}

// Always is for If: every failure passes.
func Always(error) bool { return true }

// OnRetry calls notify before each pause, with the failure and the pause:
// where the caller logs that it tries again.
func OnRetry(notify func(err error, in time.Duration)) Option {
	return func(o *options) { o.notify = notify }
}

// Do calls op until it succeeds, fails for a reason that does not pass
// (not Transient, or as If says), p.For has passed, or ctx ends. It returns
// nil or op's last error; if ctx ended, that error joined with ctx's.
func Do(ctx context.Context, p Policy, op func() error, opts ...Option) error {
	_, err := Value(ctx, p, func() (struct{}, error) { return struct{}{}, op() }, opts...)
	return err
}

// Value is Do for an operation that returns a value.
func Value[T any](ctx context.Context, p Policy, op func() (T, error), opts ...Option) (T, error) {
	o := options{retryable: Transient}
	for _, opt := range opts {
		opt(&o)
	}
	var last error
	ropts := []backoff.RetryOption{backoff.WithBackOff(p.BackOff()), backoff.WithMaxElapsedTime(p.For)}
	if o.notify != nil {
		ropts = append(ropts, backoff.WithNotify(o.notify))
	}
	v, err := backoff.Retry(ctx, func() (T, error) {
		v, err := op()
		last = err
		if err != nil && !o.retryable(err) {
			return v, backoff.Permanent(err)
		}
		return v, err
	}, ropts...)
	if err != nil && last != nil && ctx.Err() != nil && !errors.Is(err, last) {
		// backoff returns the context's cause alone: keep what failed.
		err = errors.Join(last, err)
	}
	return v, err
}
