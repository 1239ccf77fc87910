package retry

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// transientCodes are the JetStream API errors that pass by themselves, by
// their error code (nats-server's errors.json). Each is about a cluster or
// a server between two states, never about the request: asking again
// later gets another answer. A code that is not here is not retried, even
// with a 5xx status: 10012 (the consumer cannot be made: "ack policy can
// not be updated", …) or 10052 (invalid stream configuration) answer the
// same for ever.
var transientCodes = map[jetstream.ErrorCode]string{
	10004: "JSClusterIncompleteErr: incomplete results",
	10007: "JSClusterNotAssignedErr: the cluster has not assigned the asset to this server yet",
	10008: "JSClusterNotAvailErr: JetStream system temporarily unavailable",
	10009: "JSClusterNotLeaderErr: no leader to handle the request (an election)",
	10163: "JSStreamExpectedLastSeqPerSubjectNotReady: expected last sequence per subject temporarily unavailable",
}

// Transient reports whether a NATS or JetStream request failed for a
// reason that passes by itself, and is worth sending again:
//
//   - no answer in time (nats.ErrTimeout, context.DeadlineExceeded of a
//     request's own deadline): a server restarting, a lost connection;
//   - no ack in time for an asynchronous publish (ErrAsyncPublishTimeout):
//     the object store's chunks are published so, and a NATS server
//     killed while a job's output was stored failed the job, where putting
//     the same content again succeeds;
//   - nobody answering (nats.ErrNoResponders, jetstream.ErrNoStreamResponse):
//     JetStream not up yet, a stream whose leader has just gone;
//   - the connection being made again (nats.ErrDisconnected,
//     nats.ErrConnectionReconnecting);
//   - a JetStream API error whose code is on the list above: a cluster
//     without a leader, or not yet done assigning;
//   - an error that says of itself that it passes (a method Transient
//     that returns true): a service that answered it could not do it now
//     (pkg/gate, whose server stops or whose JetStream is away).
//
// Anything else, such as a configuration the server refuses, a closed
// connection or a cancelled context, is not helped by asking again.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	var passes interface{ Transient() bool }
	if errors.As(err, &passes) && passes.Transient() {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		_, ok := transientCodes[apiErr.ErrorCode]
		return ok
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrAsyncPublishTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting)
}
