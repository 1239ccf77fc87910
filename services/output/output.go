package output

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/gate"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/pkg/trace"
	"github.com/e31net/e31/services/output/retention"
)

// Verifier checks that one returned file is stored intact. It returns an
// error wrapping ErrDamaged when the file is missing or does not match its
// digest, and any other error when it could not tell (the check is retried).
// It is called for many files at once.
type Verifier interface {
	VerifyFile(ctx context.Context, f events.OutputFile) error
}

// ErrDamaged marks a returned file that is missing from the store or does
// not match its digest.
var ErrDamaged = errors.New("output: stored file is missing or damaged")

// Config configures the service. It is the one way the service is built,
// by its own main, `e31 serve output` and `e31 dev` alike: the zero value is a
// working service, and New fills in the defaults of the fields left zero.
type Config struct {
	// Source is the CloudEvents source it stamps; default
	// events.DefaultSource ("e31/output/HOST").
	Source string
	Logger *slog.Logger
	Now    func() time.Time
	// Verifier checks returned files; default a StoreVerifier over the
	// job's submitter's store.
	Verifier Verifier
	// Stores gives each submitter's data store. With it, OUTPUT reads output
	// manifests (so it verifies every file, however many an event lists),
	// stores the manifest of what it returns, and deletes what retention or
	// a submitter's request frees. Without one it verifies the files listed
	// in events only, and deletes nothing. Neither Verifier nor Stores:
	// every submitter's bucket in js, made when missing.
	Stores stage.Stores
	// Store, if set instead of Stores, serves every submitter (tests).
	Store stage.Store
	// DeleteGrace is the time between a deletion and the sweep that removes
	// the freed objects; default retention.DefaultDeleteGrace.
	DeleteGrace time.Duration
	// KeepDeleted is how long a job whose data and output are all deleted
	// is remembered; default retention.DefaultKeepDeleted.
	KeepDeleted time.Duration
	// Queries bounds what askers may hold of the stored endpoint at once
	// (zero fields: query's defaults).
	Queries query.Limits
}

// Service is the OUTPUT step; any number may run. With Stores, it runs
// the retention of what jobs stored too (see package retention).
type Service struct {
	js     jetstream.JetStream
	pub    *bus.Publisher
	log    *slog.Logger
	verify Verifier // nil: a StoreVerifier over the job's store
	stores stage.Stores
	// retention is nil without Stores: then nothing is deleted.
	retention *retention.Service
}

// New returns a Service on js.
func New(js jetstream.JetStream, cfg Config) (*Service, error) {
	if cfg.Stores == nil && cfg.Store != nil {
		cfg.Stores = stage.Single{Store: cfg.Store}
	}
	if cfg.Verifier == nil && cfg.Stores == nil {
		cfg.Stores = stage.NewTenants(js, true)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Source == "" {
		cfg.Source = events.DefaultSource("output")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{
		js: js, pub: bus.NewPublisher(js, cfg.Source, cfg.Now), log: cfg.Logger.With("service", "output"),
		verify: cfg.Verifier, stores: cfg.Stores,
	}
	if cfg.Stores != nil {
		r, err := retention.New(js, retention.Config{Publisher: s.pub, Stores: cfg.Stores, Logger: s.log, Now: cfg.Now,
			DeleteGrace: cfg.DeleteGrace, KeepDeleted: cfg.KeepDeleted, Queries: cfg.Queries})
		if err != nil {
			return nil, fmt.Errorf("output: %w", err)
		}
		s.retention = r
	}
	return s, nil
}

// QueryStats are the counts of the stored endpoint (see package
// retention); zero without Stores, or until Run serves it.
func (s *Service) QueryStats() query.Stats {
	if s.retention == nil {
		return query.Stats{}
	}
	return s.retention.QueryStats()
}

// Run handles events until ctx ends: stopped jobs, and, with a Store, the
// retention of what jobs stored and the node gate (pkg/gate): what the run
// nodes read and write of the jobs held on them.
func (s *Service) Run(ctx context.Context) error {
	if err := events.Setup(ctx, s.js, events.StreamOptions{}); err != nil {
		return err
	}
	start, err := s.takeOverStopsConsumer(ctx)
	if err != nil {
		return err
	}
	returned := bus.Handler{
		Name:       "output",
		Topic:      stopsTopic,
		Subscriber: bus.SubscriberConfig{Durable: "output", Lanes: 16, StartSeq: start},
		Handle:     s.Handle,
	}
	if s.retention == nil {
		return bus.Run(ctx, s.js, s.pub, "output", s.log, returned)
	}
	// Returning, retention and the node gate end together: the first to
	// fail ends the others, and Run returns its error. The gate is here
	// because OUTPUT holds what it needs already (pkg/gate says why).
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return bus.Run(ctx, s.js, s.pub, "output", s.log, returned) })
	g.Go(func() error { return s.retention.Run(ctx) })
	g.Go(func() error { return gate.New(s.js, gate.Config{Stores: s.stores, Logger: s.log}).Run(ctx) })
	return g.Wait()
}

// Handle verifies what a stopped job left and records it as returned.
func (s *Service) Handle(ctx context.Context, env events.Envelope) error {
	stopped, ok := env.Event.(*events.RunStopped)
	if !ok {
		return nil
	}
	if s.pub.Now().Sub(env.Time) > historyAge && s.returnedAlready(ctx, env.Subject, stopped.Attempt) {
		return nil
	}
	// A node may publish a stop of any job under its own name; only the
	// node the attempt was held on speaks for it.
	holder, held, err := s.holderOf(ctx, env.Subject, stopped.Attempt, stopped.Node)
	if err != nil {
		return fmt.Errorf("return output of %s attempt %d: %w", env.Subject, stopped.Attempt, err)
	}
	if !held || !events.FromHolder(stopped, holder) {
		s.log.Warn("setting aside a stop from a node the attempt was not held on", "job", env.Subject,
			"attempt", stopped.Attempt, "node", stopped.Node, "held_on", holder, "seq", env.Seq)
		return nil
	}
	if s.expiredBefore(ctx, env, stopped.Attempt) {
		return nil
	}
	vctx, span := trace.Child(ctx, "output verify", trace.KeyJob.String(env.Subject), trace.KeyAttempt.Int(stopped.Attempt))
	c, err := s.check(vctx, env.Subject, stopped)
	trace.End(span, err)
	if err != nil {
		return fmt.Errorf("verify output of %s attempt %d: %w", env.Subject, stopped.Attempt, err)
	}
	stored, err := s.pub.React(ctx, env, func(after []events.Envelope) ([]events.Event, error) {
		return decide(*stopped, c, after), nil
	})
	if err != nil {
		return fmt.Errorf("return output of %s attempt %d: %w", env.Subject, stopped.Attempt, err)
	}
	for _, e := range stored {
		s.log.Info("output returned", "job", env.Subject, "attempt", stopped.Attempt, "files", stopped.Output.FileCount(), "seq", e.Seq)
	}
	return nil
}

// historyAge is how old a stop is, when OUTPUT first sees it, for OUTPUT
// to look first for its return. Such a stop is from the log's history
// (OUTPUT catching up after a restart, or starting over a long log) and
// was most likely returned already: a look at the job's last return is
// one lookup in the server's index of subjects, where doing the return
// again verifies the files, then fails to append behind the job's later
// events and reads them all to find the return. A stop seen at once has
// no return yet: the look would be one request more for nothing.
const historyAge = 30 * time.Second

// returnedAlready reports whether the last return recorded for job is
// attempt's. Anything else (no return, another attempt's, one that does
// not decode, no answer) is false: the stop is then handled as any other,
// which finds out for sure.
func (s *Service) returnedAlready(ctx context.Context, job string, attempt int) bool {
	subject, err := events.SubjectOf(job, &events.OutputReturned{})
	if err != nil {
		return false
	}
	m, err := bus.Last(ctx, s.js, subject)
	if err != nil {
		return false
	}
	env, err := events.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		return false
	}
	r, ok := env.Event.(*events.OutputReturned)
	return ok && r.Attempt == attempt
}

// holderOf is the node attempt of job was held on, and false if no hold
// of that attempt is in the log: as the log's leader says where a replica
// does not know it (a lagging replica may not have the hold yet, and an
// honest stop taken for a foreign one would be a job that never ends). It
// looks first at the last hold on claimed, the node that sent the stop:
// that is the attempt's, unless a node forged the stop, or held the job
// again since.
func (s *Service) holderOf(ctx context.Context, job string, attempt int, claimed string) (string, bool, error) {
	if subject, err := events.SubjectOf(job, &events.ComputeHeld{Hold: events.Hold{Node: claimed}}); err == nil {
		// Any replica first (a direct get, the cheapest read): one that
		// has the hold has it in its place; one that has not may lag, and
		// the leader says.
		for _, last := range []func() (*jetstream.RawStreamMsg, error){
			func() (*jetstream.RawStreamMsg, error) { return bus.Last(ctx, s.js, subject) },
			func() (*jetstream.RawStreamMsg, error) { return bus.LeaderLast(ctx, s.js, events.Stream, subject) },
		} {
			m, err := last()
			if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return "", false, err
			}
			if err != nil {
				continue
			}
			if env, err := events.Decode(m.Subject, m.Header, m.Data); err == nil {
				if h, ok := env.Event.(*events.ComputeHeld); ok && h.Attempt == attempt {
					return h.Node, true, nil
				}
			}
		}
	}
	history, err := bus.ReadJob(ctx, s.js, job, 1)
	if err != nil {
		return "", false, err
	}
	node, ok := events.HeldOn(history, attempt)
	return node, ok, nil
}

// checked is what verifying a stop's output found.
type checked struct {
	// damaged lists the files missing from the store or not matching their
	// digests, in path order; damagedBytes is their size.
	damaged      []string
	damagedBytes int64
	// lost counts files that cannot even be named: the stop's manifest is
	// missing or damaged, and its event lists only some files.
	lost      int
	lostBytes int64
	// manifest names the folder of the files returned ("" if none is).
	manifest string
}

// check verifies every collected file, Parallel at a time: those the
// event lists, and with a Store every one its manifest names. When files
// are damaged it stores the manifest of those that are not, so that what
// OutputReturned names is exactly what can be fetched.
func (s *Service) check(ctx context.Context, job string, stopped *events.RunStopped) (checked, error) {
	var c checked
	out := stopped.Output
	files := out.Files
	// A job's output is in its submitter's store.
	var store stage.Store
	if out.Manifest == "" && len(out.Files) == 0 {
		// Nothing returned (most trivial jobs): nothing to verify, and no
		// reason to read who the submitter is, a read of the log per job.
		// The job's empty output is still returned (OutputReturned).
		return c, nil
	}
	if s.stores != nil {
		submitter, err := bus.Owner(ctx, s.js, job)
		if err != nil {
			return c, err
		}
		if store, err = s.stores.For(ctx, submitter); err != nil {
			return c, err
		}
	}
	verify := s.verify
	if verify == nil {
		verify = StoreVerifier{Store: store}
	}
	if out.Manifest != "" && store != nil {
		all, err := stage.ManifestFiles(ctx, store, out.Manifest)
		switch {
		case err == nil:
			files = all
		case isDamage(err):
			s.log.Warn("output manifest is missing or damaged", "job", job, "manifest", out.Manifest, "err", err)
			var listed int64
			for _, f := range out.Files {
				listed += f.Bytes
			}
			c.lost, c.lostBytes = out.FileCount()-len(out.Files), out.Bytes-listed
		default:
			return c, err
		}
	}
	bad := make([]bool, len(files))
	var (
		mu    sync.Mutex
		first error
	)
	err := eachFile(ctx, len(files), func(ctx context.Context, i int) error {
		err := verify.VerifyFile(ctx, files[i])
		switch {
		case err == nil:
		case errors.Is(err, ErrDamaged):
			s.log.Warn("returned file is damaged", "job", job, "path", files[i].Path, "err", err)
			bad[i] = true
		default:
			mu.Lock()
			if first == nil {
				first = fmt.Errorf("%s: %w", files[i].Path, err)
			}
			mu.Unlock()
			return first
		}
		return nil
	})
	if err != nil {
		return c, err
	}
	var good []events.OutputFile
	for i, f := range files {
		if bad[i] {
			c.damaged = append(c.damaged, f.Path)
			c.damagedBytes += f.Bytes
		} else {
			good = append(good, f)
		}
	}
	switch {
	case len(c.damaged) == 0 && c.lost == 0:
		c.manifest = out.Manifest
	case store != nil && len(good) > 0:
		d, err := stage.PutManifest(ctx, store, good)
		if err != nil {
			return c, fmt.Errorf("store the manifest of what is returned: %w", err)
		}
		c.manifest = d
	}
	return c, nil
}

// eachFile runs fn for every index on 16 goroutines and returns the first
// error.
func eachFile(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		next  int
		first error
	)
	for range min(n, 16) {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil || i >= n
				mu.Unlock()
				if stop {
					return
				}
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// isDamage reports whether err says stored data is missing or not intact.
func isDamage(err error) bool {
	for _, target := range []error{stage.ErrNotFound, stage.ErrCorrupt, stage.ErrBadManifest, stage.ErrBadRef, stage.ErrUnsafePath} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// Decide is what OUTPUT appends for a stopped attempt: nothing if its output
// was already returned; otherwise the verified files and the final outcome.
// damaged lists collected files that failed verification: they are not
// returned, and the job is not reported as succeeded without them. The
// stop's manifest is returned with the files when nothing is damaged.
func Decide(stopped events.RunStopped, damaged []string, after []events.Envelope) []events.Event {
	c := checked{damaged: damaged}
	bad := make(map[string]bool, len(damaged))
	for _, d := range damaged {
		bad[d] = true
	}
	for _, f := range stopped.Output.Files {
		if bad[f.Path] {
			c.damagedBytes += f.Bytes
		}
	}
	if len(damaged) == 0 {
		c.manifest = stopped.Output.Manifest
	}
	return decide(stopped, c, after)
}

// maxMissingListed bounds the damaged paths an OutputReturned adds to
// Missing and its reason names: the event must stay small.
const maxMissingListed = 100

// decide is Decide with everything check found.
func decide(stopped events.RunStopped, c checked, after []events.Envelope) []events.Event {
	for _, e := range after {
		switch r := e.Event.(type) {
		case *events.OutputReturned:
			if r.Attempt == stopped.Attempt {
				return nil
			}
		case *events.HoldExpired, *events.ComputeReleased:
			// RENT ended the attempt before its output could be returned
			// (see expiredBefore): the stop is set aside.
			if h, _ := events.HoldOf(r); h.Attempt == stopped.Attempt {
				return nil
			}
		}
	}
	bad := make(map[string]bool, len(c.damaged))
	for _, d := range c.damaged {
		bad[d] = true
	}
	out := stopped.Output
	ret := events.OutputReturned{
		Hold:     stopped.Hold,
		Outcome:  stopped.Outcome,
		Reason:   stopped.Reason,
		Files:    []events.OutputFile{},
		Missing:  append([]string{}, out.Missing...),
		Manifest: c.manifest,
	}
	var listedBytes int64
	for _, f := range out.Files {
		if bad[f.Path] {
			ret.Missing = append(ret.Missing, f.Path)
			continue
		}
		ret.Files = append(ret.Files, f)
		listedBytes += f.Bytes
	}
	// Damaged files beyond those listed are named too, up to a bound.
	for _, d := range c.damaged {
		if len(ret.Missing) >= len(out.Missing)+maxMissingListed {
			break
		}
		if !listedPath(out.Files, d) {
			ret.Missing = append(ret.Missing, d)
		}
	}
	count := out.FileCount() - len(c.damaged) - c.lost
	if count > len(ret.Files) {
		ret.Count = count
		ret.Bytes = out.Bytes - c.damagedBytes - c.lostBytes
	} else {
		ret.Bytes = listedBytes
	}
	switch stopped.Outcome {
	case events.LimitExceeded, events.OutOfMemory, events.DiskExceeded, events.Cancelled, events.NodeLost:
		// The job did not run to its end: what it had is returned, as partial.
		ret.Partial = true
	}
	var problems []string
	if len(c.damaged) > 0 {
		problems = append(problems, "output failed verification: "+joinBounded(c.damaged))
	}
	if c.lost > 0 {
		problems = append(problems, fmt.Sprintf("output manifest %s is missing or damaged: %d unlisted file(s) not returned", out.Manifest, c.lost))
	}
	if ret.Outcome == events.Succeeded {
		if missing := requiredMissing(stopped); len(missing) > 0 {
			problems = append(problems, "required output missing: "+strings.Join(missing, ", "))
		}
		if len(problems) > 0 {
			ret.Outcome = events.Failed
			ret.Reason = strings.Join(problems, "; ")
		}
	}
	return []events.Event{&ret}
}

func listedPath(files []events.OutputFile, p string) bool {
	for _, f := range files {
		if f.Path == p {
			return true
		}
	}
	return false
}

// joinBounded names at most maxMissingListed paths, and counts the rest.
func joinBounded(paths []string) string {
	if len(paths) <= maxMissingListed {
		return strings.Join(paths, ", ")
	}
	return strings.Join(paths[:maxMissingListed], ", ") + fmt.Sprintf(" and %d more", len(paths)-maxMissingListed)
}

// requiredMissing lists the declared outputs that are required and matched
// nothing. RunStopped lists every declaration that matched nothing; whether
// it was required comes from the spec RUN copied into Collected.
func requiredMissing(stopped events.RunStopped) []string {
	var out []string
	required := make(map[string]bool)
	for _, d := range stopped.Output.Declared {
		required[d.Path] = d.Required
	}
	for _, m := range stopped.Output.Missing {
		if req, known := required[m]; req || !known {
			out = append(out, m)
		}
	}
	return out
}

// stopsTopic is what OUTPUT consumes: every stop, on the subject that
// names its node. One filter: the server finds what a consumer of several
// filters is to be sent next by walking every subject of the block it is
// in, a few thousand jobs' on a busy log, for each message it sends (a
// third of OUTPUT's catch-up of a long log, the server's share); what
// one filter with wildcards matches it finds by reading on from the last.
var stopsTopic = events.KindSubject(events.TypeRunStopped)

// Stops were stored on a subject without their node before (legacyStops);
// OUTPUT read them with a consumer of that one filter (whose name is that
// of legacyStops), then with one of both filters (bothStops). No node may
// store a stop there now (its permissions name the subject with its
// node), so what is there is the log's past.
var (
	legacyStops = events.KindSubjects(events.TypeRunStopped)[1]
	bothStops   = strings.Join(events.KindSubjects(events.TypeRunStopped), " ")
)

// takeOverStopsConsumer returns where the consumer of stopsTopic is to
// start, if it is made now: after the last stop the consumer OUTPUT read
// stops with before had settled (of bothStops, or of legacyStops before
// it), rather than from the first stop of the log, which OUTPUT would
// read again at every upgrade of a long log, ahead of the jobs that stop
// meanwhile. Before the consumer of stopsTopic is made, it hands OUTPUT
// every stop on the subject of before from there (from the start of the
// log if there was no consumer: a log that OUTPUT reads for the first
// time), which the new consumer would not; then it deletes the old
// consumers: what they had not settled comes again (a stop handled twice
// changes nothing). Once the consumer of stopsTopic is there, it returns
// 0 (where it already is).
func (s *Service) takeOverStopsConsumer(ctx context.Context) (uint64, error) {
	if _, err := s.js.Consumer(ctx, events.Stream, bus.ConsumerName("output", stopsTopic)); err == nil {
		return 0, nil
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, fmt.Errorf("output: the consumer of stops: %w", err)
	}
	var start uint64
	var olds []string
	for _, topic := range []string{bothStops, legacyStops} {
		name := bus.ConsumerName("output", topic)
		old, err := s.js.Consumer(ctx, events.Stream, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("output: the consumer of stops from before: %w", err)
		}
		if start == 0 {
			start = old.CachedInfo().AckFloor.Stream + 1
		}
		olds = append(olds, name)
	}
	if err := s.handleLegacyStops(ctx, max(start, 1)); err != nil {
		return 0, err
	}
	for _, name := range olds {
		if err := s.js.DeleteConsumer(ctx, events.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return 0, fmt.Errorf("output: the consumer of stops from before: %w", err)
		}
		s.log.Info("the consumer of stops from before is replaced", "old", name, "from", start)
	}
	return start, nil
}

// handleLegacyStops hands Handle every stop stored on the subject of
// before (legacyStops) from sequence from, as the log is now, each tried
// again a few times as a consumer would. One that still fails fails
// OUTPUT's start: the next start hands it over again, since the consumer
// of stopsTopic is made only after. From the start of the log the server
// counts them by its index of subjects: none costs one question.
func (s *Service) handleLegacyStops(ctx context.Context, from uint64) error {
	_, err := bus.Replay(ctx, s.js, bus.ReplayOptions{Filters: []string{legacyStops}, From: from, Logger: s.log}, func(env events.Envelope) error {
		var err error
		for try := range legacyTries {
			if err = s.Handle(ctx, env); err == nil {
				return nil
			}
			s.log.Warn("a stop from before failed, tried again", "job", env.Subject, "seq", env.Seq, "try", try+1, "err", err)
			select {
			case <-time.After(time.Duration(try+1) * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return fmt.Errorf("output: the stop of %s at #%d, stored before stops named their node: %w", env.Subject, env.Seq, err)
	})
	return err
}

// legacyTries is how often handleLegacyStops tries a stop.
const legacyTries = 5
