package client

import "errors"

// What went wrong, for a program: the errors of this package wrap one of
// these where it applies, checked with errors.Is. An error that wraps none
// is trouble reaching e31 or getting an answer in time.
var (
	// ErrNoSuchJob: the job does not exist, or is not the asker's.
	ErrNoSuchJob = errors.New("no such job")
	// ErrNotPermitted: the server's permissions refused what was asked.
	ErrNotPermitted = errors.New("not permitted")
	// ErrBusy: a service answered "busy" until the request's deadline.
	ErrBusy = errors.New("the service stayed busy")
	// ErrInvalid: what was asked is not valid (not a job id, a question
	// the ledger refuses); asking again will not help.
	ErrInvalid = errors.New("client: invalid request")
	// ErrCredentials: the credentials file cannot be read or used.
	ErrCredentials = errors.New("client: bad credentials")
	// ErrAuthentication: the server refused the connection's credentials.
	ErrAuthentication = errors.New("client: credentials refused")
	// ErrNotRunning: no instance of the service asked is listening: it is
	// down, or starting (it listens once it has read its state).
	ErrNotRunning = errors.New("client: nothing answers")
	// ErrUnreachable: no NATS server answered.
	ErrUnreachable = errors.New("client: NATS unreachable")
	// ErrFull: staging did not fit the submitter's max-data, or the event
	// log had no room for the request; nothing stored before was lost. A
	// log that is only nearly full takes the request and SUBMIT rejects
	// the job with the reason (events.LogNearlyFull).
	ErrFull = errors.New("client: data store full")
	// ErrNoLogs: the job never ran, and has no logs, or they were deleted
	// with its output.
	ErrNoLogs = errors.New("client: no logs")
	// ErrNoOutput: the job has no output to write (it never returned any,
	// or it was deleted), or what was returned could not be written whole.
	ErrNoOutput = errors.New("client: no output")
)

// kindError is an error of one of the kinds above whose message is its
// own: the kind is for errors.Is, not for people.
type kindError struct {
	kind, err error
}

func kind(k, err error) error { return &kindError{kind: k, err: err} }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }
