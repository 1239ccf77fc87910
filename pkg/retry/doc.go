// Package retry is e31's one way to try again: exponential backoff with
// jitter (github.com/cenkalti/backoff/v5), a Policy per use with its caps
// named in one place (this package's variables), and Transient, the
// explicit list of JetStream and NATS conditions that pass by themselves.
//
// Why one place: the same loop written nine times had nine different caps,
// no jitter (every service retried in step after a server restart) and a
// classification by HTTP-like code (Code >= 500) that retried permanent
// server errors, such as 10012 "ack policy can not be updated", for ever.
// A cap that is wrong is now wrong once, in policies.go, and a condition
// is transient because it is on the list in transient.go, with a test.
//
// What is not retried here: a conflict on a job's expected last sequence
// (10071, 10164) is decided again from what happened (bus.React), never
// simply sent again; and a redelivery's delay is the consumer's BackOff
// (bus.SubscriberConfig), applied by the server.
package retry
