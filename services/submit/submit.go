// Package submit is the SUBMIT step: it takes a job request from the log,
// checks the declaration and that every staged input is present and intact,
// and records JobSubmitted or, with every problem found, JobRejected. A job
// that is rejected is never held.
//
// Requests come from anyone allowed to publish them (the CLI, or an
// upstream system using only the published JSON Schemas), so SUBMIT trusts
// nothing in them: the same validation runs here as in the CLI.
//
// The decision is Decide, a pure function of the request and what SUBMIT
// knows (State: the submitter's limits and usage, and what the jobs and
// data it names are); Handle is the adapter that reads what Decide asks
// for and records its decision once (Once) through bus.React.
package submit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/stage"
)

// Config configures the service. It is the one way the service is built,
// by its own main, `e31 serve submit` and `e31 dev` alike: the zero value is a
// working service, and New fills in the defaults of the fields left zero.
type Config struct {
	// Source is the CloudEvents source it stamps; default
	// events.DefaultSource ("e31/submit/HOST").
	Source string
	Logger *slog.Logger
	Now    func() time.Time
	// Stores gives each submitter's store. Store, if set instead, serves
	// every submitter (tests). Neither: every submitter's bucket in js,
	// made when missing.
	Stores stage.Stores
	Store  stage.Store
	// Limits gives each submitter's limits and allowed images. Default:
	// Run watches the limits bucket (and a Service that is not Run uses
	// the built-in defaults).
	Limits *limits.Book
	// LogCheckEvery is how often SUBMIT reads how full the log is while it
	// has room (a full one is read for every request); default
	// 250 ms: a burst of requests costs one read of the stream's state per
	// interval, and the log's reserve (events.LogReserve) absorbs the jobs
	// accepted within one.
	LogCheckEvery time.Duration
}

// Service is the SUBMIT step; any number may run.
type Service struct {
	js     jetstream.JetStream
	pub    *bus.Publisher
	log    *slog.Logger
	stores stage.Stores
	now    func() time.Time
	limits *limits.Book

	// mu guards queue, which is brought up to date as a request needs it
	// (catchUp).
	mu    sync.Mutex
	queue *Queue

	// fillMu guards fill: how full the log was, read at fillAt.
	fillMu    sync.Mutex
	fill      string
	fillAt    time.Time
	fillEvery time.Duration
}

// logFull returns why the log has no room for another job (empty: it has),
// read at most every Config.LogCheckEvery while it has room.
func (s *Service) logFull(ctx context.Context) (string, error) {
	s.fillMu.Lock()
	defer s.fillMu.Unlock()
	// A full log is read again for every request: the moment the operator
	// gives it room, jobs are accepted again.
	if now := time.Now(); s.fill != "" || s.fillAt.IsZero() || now.Sub(s.fillAt) >= s.fillEvery {
		str, err := s.js.Stream(ctx, events.Stream)
		if err != nil {
			return "", fmt.Errorf("read how full the log is: %w", err)
		}
		info := str.CachedInfo()
		s.fill, _ = events.LogNearlyFull(int64(info.State.Bytes), info.Config.MaxBytes)
		s.fillAt = now
	}
	return s.fill, nil
}

// New returns a Service.
func New(js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Stores == nil && cfg.Store != nil {
		cfg.Stores = stage.Single{Store: cfg.Store}
	}
	if cfg.Stores == nil {
		cfg.Stores = stage.NewTenants(js, true)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Source == "" {
		cfg.Source = events.DefaultSource("submit")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LogCheckEvery <= 0 {
		cfg.LogCheckEvery = 250 * time.Millisecond
	}
	return &Service{fillEvery: cfg.LogCheckEvery, js: js, pub: bus.NewPublisher(js, cfg.Source, cfg.Now), log: cfg.Logger.With("service", "submit"), stores: cfg.Stores,
		now: cfg.Now, limits: cfg.Limits, queue: NewQueue()}, nil
}

// Run handles requests until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Setup(ctx, s.js, events.StreamOptions{}); err != nil {
		return err
	}
	if s.limits == nil {
		wctx, cancel := context.WithCancel(ctx)
		book, err := limits.Watch(wctx, s.js)
		if err != nil {
			cancel()
			return fmt.Errorf("submit: %w", err)
		}
		defer func() { cancel(); <-book.Done() }()
		s.limits = book
	}
	return bus.Run(ctx, s.js, s.pub, "submit", s.log, bus.Handler{
		Name:        "submit",
		Topic:       events.KindSubject(events.TypeJobRequested),
		Subscriber:  bus.SubscriberConfig{Durable: "submit", Lanes: 16},
		Handle:      s.Handle,
		Undecodable: s.Unreadable,
	})
}

// ErrIDInUse is the poison reason for a request whose job id already names
// another job: any request after the job's first, well-formed or not, from
// anyone. It cannot be recorded on that job's log without corrupting it,
// and it must not change the job, so it goes to the poison stream; clients
// avoid it by publishing the request only if the job has no events yet.
var ErrIDInUse = errors.New("submit: job id already in use")

// Handle decides one request.
func (s *Service) Handle(ctx context.Context, env events.Envelope) error {
	req, ok := env.Event.(*events.JobRequested)
	if !ok {
		return nil
	}
	first, err := s.firstSeq(ctx, env.Subject)
	if err != nil {
		return err
	}
	if first != env.Seq {
		return bus.Permanent(fmt.Errorf("%w: %s (its first event is #%d, this request is #%d)", ErrIDInUse, env.Subject, first, env.Seq))
	}
	decision, err := s.check(ctx, env.Subject, env.Seq, req)
	if err != nil {
		return fmt.Errorf("check %s: %w", env.Subject, err)
	}
	stored, err := s.pub.React(ctx, env, func(after []events.Envelope) ([]events.Event, error) {
		return Once(after, decision), nil
	})
	if err != nil {
		return fmt.Errorf("submit %s: %w", env.Subject, err)
	}
	for _, e := range stored {
		if rej, ok := e.Event.(*events.JobRejected); ok {
			s.log.Info("job rejected", "job", env.Subject, "reason", rej.Reason, "seq", e.Seq)
		} else {
			s.log.Info("job submitted", "job", env.Subject, "submitter", req.Submitter, "seq", e.Seq)
		}
	}
	return nil
}

// Unreadable refuses a request e31 cannot read (bad JSON, an unknown field,
// a body that disagrees with its subject) with a JobRejected that names the
// problem, so that whoever published it learns why, as with an invalid
// declaration. Only the job's first request is answered this way: garbage
// under an id already in use goes to the poison stream, and the job it
// names goes on as if it were not there.
func (s *Service) Unreadable(ctx context.Context, subject string, seq uint64, problem error) error {
	subj, err := events.ParseSubject(subject)
	if err != nil || !subj.IsRequest() || seq == 0 {
		return bus.Permanent(problem)
	}
	job := subj.Job
	first, err := s.firstSeq(ctx, job)
	if err != nil {
		return err
	}
	if first != seq {
		return bus.Permanent(fmt.Errorf("%w: %s, and the request cannot be read: %v", ErrIDInUse, job, problem))
	}
	// The reason says what is wrong with the body; the subject is the
	// submitter's own and needs no repeating.
	what := problem
	var de *events.DecodeError
	if errors.As(problem, &de) {
		what = de.Err
	}
	reason := "the request is not a valid " + events.TypeJobRequested + " event: " + what.Error()
	trigger := events.Envelope{Subject: job, Seq: seq}
	stored, err := s.pub.React(ctx, trigger, func(after []events.Envelope) ([]events.Event, error) {
		return Once(after, &events.JobRejected{Reason: reason}), nil
	})
	if err != nil {
		return fmt.Errorf("reject unreadable request %s: %w", job, err)
	}
	if len(stored) > 0 {
		s.log.Info("unreadable request rejected", "job", job, "reason", reason, "seq", stored[0].Seq)
	}
	return nil
}

// firstSeq is the sequence of the job's first request, readable or not:
// the one request that says what the job is. Anyone may publish a request
// under any job id on its own tail, and what comes after the first, or on
// the job's other subjects before it, is no request for this job.
func (s *Service) firstSeq(ctx context.Context, job string) (uint64, error) {
	m, err := bus.FirstRequest(ctx, s.js, job)
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

// check returns JobSubmitted or JobRejected for a request: Decide, given
// what it asks to be read, in the order it asks. An error means it could
// not tell (the store did not answer) and the request is retried.
func (s *Service) check(ctx context.Context, job string, seq uint64, req *events.JobRequested) (events.Event, error) {
	full, err := s.logFull(ctx)
	if err != nil {
		return nil, err
	}
	st := State{LogFull: full, Limits: s.limitsOf(req.Submitter)}
	if ev := Decide(job, req, st); ev != nil {
		return ev, nil
	}
	usage, err := s.usage(ctx, req.Submitter, seq)
	if err != nil {
		return nil, err
	}
	st.Usage = &usage
	if ev := Decide(job, req, st); ev != nil {
		return ev, nil
	}
	if st.Refs, err = s.readRefs(ctx, job, req); err != nil {
		return nil, err
	}
	return Decide(job, req, st), nil
}

// readRefs reads what the request names: the owner of each job it runs
// after, the output of each job it reads, and whether each staged input is
// present and intact.
func (s *Service) readRefs(ctx context.Context, job string, req *events.JobRequested) (*Refs, error) {
	refs := &Refs{Owners: map[string]string{}, Outputs: map[string]Output{}, Checkpoints: map[string]Output{}, Staged: map[int]string{}}
	for _, dep := range req.Spec.After {
		if _, seen := refs.Owners[dep]; seen || dep == job {
			continue
		}
		owner, err := bus.Owner(ctx, s.js, dep)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return nil, err
		default:
			refs.Owners[dep] = owner
		}
	}
	store, err := s.stores.For(ctx, req.Submitter)
	if err != nil {
		return nil, err
	}
	for i, ref := range req.Spec.Data {
		if ref.CheckpointOf != "" {
			if _, seen := refs.Checkpoints[ref.CheckpointOf]; seen {
				continue
			}
			var cp Output
			cp.Ref, cp.Problem, err = s.checkpointOf(ctx, store, req.Submitter, ref.CheckpointOf)
			if err != nil {
				return nil, err
			}
			refs.Checkpoints[ref.CheckpointOf] = cp
			continue
		}
		if ref.FromJob != "" {
			if _, seen := refs.Outputs[ref.FromJob]; seen {
				continue
			}
			var out Output
			out.Ref, out.Pending, out.Problem, err = s.outputOf(ctx, store, req.Submitter, ref.FromJob)
			if err != nil {
				return nil, err
			}
			refs.Outputs[ref.FromJob] = out
			continue
		}
		err := stage.Verify(ctx, store, ref)
		switch {
		case err == nil:
		case isBadData(err):
			refs.Staged[i] = fmt.Sprintf("staged data %s is not intact: %v", ref.Digest, err)
		default:
			return nil, err
		}
	}
	return refs, nil
}

// limitsOf is a submitter's limits.
func (s *Service) limitsOf(submitter string) limits.Limits {
	if s.limits == nil {
		return limits.Resolve(submitter, limits.Policy{}, limits.Policy{})
	}
	return s.limits.For(submitter)
}

// usage is what submitter had before the request at seq. The queue is
// read up to the request first, from where it was: whichever request gets
// here first reads for every request waiting behind it, so a burst costs a
// read of the log per batch, not per request.
func (s *Service) usage(ctx context.Context, submitter string, seq uint64) (limits.Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queue.Applied() < seq {
		last, err := bus.Replay(ctx, s.js, bus.ReplayOptions{Filters: []string{events.JobSubjects}, From: s.queue.Applied() + 1, Logger: s.log},
			func(env events.Envelope) error {
				s.queue.Apply(env)
				return nil
			})
		s.queue.Through(last)
		if err != nil {
			return limits.Usage{}, fmt.Errorf("quota of %s: %w", submitter, err)
		}
	}
	return s.queue.Usage(submitter, seq, s.now()), nil
}

func isBadData(err error) bool {
	for _, target := range []error{stage.ErrNotFound, stage.ErrCorrupt, stage.ErrBadManifest, stage.ErrBadRef, stage.ErrUnsafePath, stage.ErrUnsupported} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// outputOf turns the returned output of an earlier job of the same
// submitter into a data ref if that job succeeded, says it is pending if it
// has not finished, and otherwise says why it cannot be used. Another
// submitter's job cannot be used: its output is returned to that submitter
// alone.
func (s *Service) outputOf(ctx context.Context, store stage.Store, submitter, job string) (ref events.DataRef, pending bool, problem string, err error) {
	if !events.ValidID(job) {
		return ref, false, fmt.Sprintf("from_job %q is not a job id", job), nil
	}
	history, err := bus.ReadJob(ctx, s.js, job, 1)
	if err != nil {
		return ref, false, "", err
	}
	if len(history) == 0 || ownerOf(history) != submitter {
		// Another submitter's job is, for this one, no job at all.
		return ref, false, fmt.Sprintf("from_job %s: no such job", job), nil
	}
	over, outcome, ret := events.FinalOutput(history)
	switch {
	case !over:
		return ref, true, "", nil
	case outcome != events.Succeeded || ret == nil:
		return ref, false, fmt.Sprintf("from_job %s did not succeed (%s)", job, outcome), nil
	}
	if d, gone := events.DeletedOf(history, events.WhatOutput); gone {
		return ref, false, fmt.Sprintf("from_job %s: %s", job, events.DeletedReason(d)), nil
	}
	ref, err = stage.OutputRef(ctx, store, ret.Manifest, ret.Files)
	if err != nil {
		if isBadData(err) {
			return ref, false, fmt.Sprintf("from_job %s: its output is no longer intact: %v", job, err), nil
		}
		return ref, false, "", err
	}
	return ref, false, "", nil
}

// checkpointOf turns the last checkpoint an earlier job of the same
// submitter saved into a data ref (a folder), or says why it cannot be
// used: the job is not over (its checkpoint may still change), saved none,
// or its checkpoints were deleted or are no longer intact.
func (s *Service) checkpointOf(ctx context.Context, store stage.Store, submitter, job string) (ref events.DataRef, problem string, err error) {
	history, err := bus.ReadJob(ctx, s.js, job, 1)
	if err != nil {
		return ref, "", err
	}
	if len(history) == 0 || ownerOf(history) != submitter {
		return ref, fmt.Sprintf("checkpoint_of %s: no such job", job), nil
	}
	if over, _, _ := events.FinalOutput(history); !over {
		return ref, fmt.Sprintf("checkpoint_of %s: the job is not over yet (continue it once it is)", job), nil
	}
	last, ok := events.LastCheckpoint(history)
	if !ok {
		return ref, fmt.Sprintf("checkpoint_of %s: the job saved no checkpoint", job), nil
	}
	if d, gone := events.DeletedOf(history, events.WhatOutput); gone {
		return ref, fmt.Sprintf("checkpoint_of %s: %s", job, events.DeletedReason(d)), nil
	}
	ref = events.DataRef{Digest: last.Manifest, Kind: stage.KindDir, Bytes: last.Bytes, Files: last.Files}
	if err := stage.Verify(ctx, store, ref); err != nil {
		if isBadData(err) {
			return ref, fmt.Sprintf("checkpoint_of %s: its checkpoint %s is no longer intact: %v", job, last.SaveName(), err), nil
		}
		return ref, "", err
	}
	return ref, "", nil
}

// ownerOf is the submitter of a job, from its history.
func ownerOf(history []events.Envelope) string {
	for _, e := range history {
		switch ev := e.Event.(type) {
		case *events.JobSubmitted:
			return ev.Submitter
		case *events.JobRequested:
			return ev.Submitter
		}
	}
	return ""
}
