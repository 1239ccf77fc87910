package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
)

// What the fault tests share: jobs that leave a trace outside e31 each time
// they really run, a way to submit many at once and to wait until every one
// is over, and the checks that nothing was lost and nothing ran twice.

// tracedJob is a job that appends "<job> <attempt>" to ranFile when it
// runs, outside anything e31 records, so that a run e31 did not log (or
// logged once and ran twice) shows. ranFile is a path as the run node's
// jobs see it; the process executor runs jobs unconfined, so they reach it.
func tracedJob(t testing.TB, ranFile string, seconds float64) events.JobSpec {
	t.Helper()
	src := fmt.Sprintf(`
name: traced
work:
  command: ["/bin/sh", "-c", "echo \"$E31_JOB_ID $E31_ATTEMPT\" >> %s; sleep %g; echo ok > $E31_OUTPUT/ok.txt"]
  env: {PATH: /usr/bin:/bin}
request: {cpu: 0.5, memory: 32MiB, disk: 1MiB, limit: 1m}
output: [ok.txt]
`, ranFile, seconds)
	job, err := jobfile.Parse("traced.yaml", []byte(src), "")
	if err != nil {
		t.Fatalf("traced job: %v", err)
	}
	return job.Spec
}

// submitAll requests one job per id, in batches, each only if the id is
// unused. A publish that fails (the server it went to was just killed) is
// tried again: the request's Nats-Msg-Id makes a repeat harmless, and a
// conflict means an earlier try was stored after all.
func submitAll(ctx context.Context, t testing.TB, js jetstream.JetStream, submitter string, spec events.JobSpec, ids []string) {
	t.Helper()
	pub := bus.NewPublisher(js, "e31/e2e", nil)
	const batchSize = 200
	for start := 0; start < len(ids); start += batchSize {
		todo := ids[start:min(start+batchSize, len(ids))]
		for try := 0; len(todo) > 0; try++ {
			batch := make([]bus.Pending, len(todo))
			for i, id := range todo {
				batch[i] = bus.Pending{Subject: id, Event: &events.JobRequested{Submitter: submitter, Spec: spec}, ExpectSet: true}
			}
			// Each try bounded: a server that takes the requests and
			// never answers must not hold the test until its deadline.
			tryCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, errs := pub.AppendBatch(tryCtx, batch)
			cancel()
			var again []string
			var last error
			for i, err := range errs {
				if err != nil && !errors.Is(err, bus.ErrConflict) {
					again, last = append(again, todo[i]), err
				}
			}
			if len(again) > 0 {
				if ctx.Err() != nil || try > 50 {
					t.Fatalf("submit: %d requests not stored: %v", len(again), last)
				}
				t.Logf("submit: %d requests not stored (%v); trying again", len(again), last)
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
			todo = again
		}
	}
}

// jobIDs makes n job ids with a prefix.
func jobIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return ids
}

// waitOver follows the log until every job in ids has ended (a final
// release, a rejection or a cancel), or ctx ends. It reports progress with
// logf now and then and returns the ids still not over.
func waitOver(ctx context.Context, js jetstream.JetStream, ids []string, logf func(string, ...any)) []string {
	filters := []string{
		events.KindSubject(events.TypeComputeReleased),
		events.KindSubject(events.TypeJobRejected),
		events.KindSubject(events.TypeJobCancelled),
	}
	return follow(ctx, js, filters, ids, "end", logf, func(env events.Envelope) bool { return events.Terminal(env.Event) })
}

// follow reads the events on filters from the start of the log until every
// job in ids has one that done accepts, or ctx ends, and returns the ids
// left. It reports progress with logf ("waiting for N of M jobs to what").
//
// The log is streamed, not fetched a message at a time: a test waiting for
// 100,000 jobs must not be slower than the system it watches.
func follow(ctx context.Context, js jetstream.JetStream, filters, ids []string, what string, logf func(string, ...any), done func(events.Envelope) bool) []string {
	left := make(map[string]bool, len(ids))
	for _, id := range ids {
		left[id] = true
	}
	var remaining atomic.Int64
	remaining.Store(int64(len(left)))
	for len(left) > 0 && ctx.Err() == nil {
		// An ordered consumer survives a server restart by starting again
		// where it was; if the server it was on is gone for long, it is
		// made again from the start here.
		cons, err := js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
		var it jetstream.MessagesContext
		if err == nil {
			it, err = cons.Messages(jetstream.PullMaxMessages(1024))
		}
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		stop := make(chan struct{})
		var watcher sync.WaitGroup
		watcher.Go(func() {
			report := time.NewTicker(15 * time.Second)
			defer report.Stop()
			for {
				select {
				case <-ctx.Done():
					it.Stop()
					return
				case <-stop:
					return
				case <-report.C:
					logf("waiting for %d of %d jobs to %s", remaining.Load(), len(ids), what)
				}
			}
		})
		for len(left) > 0 {
			m, err := it.Next()
			if err != nil {
				break
			}
			env, err := events.Decode(m.Subject(), m.Headers(), m.Data())
			if err == nil && left[env.Subject] && done(env) {
				delete(left, env.Subject)
				remaining.Store(int64(len(left)))
			}
		}
		it.Stop()
		close(stop)
		watcher.Wait()
	}
	var out []string
	for id := range left {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// attemptKey names one attempt of one job.
type attemptKey struct {
	job     string
	attempt int
}

// attemptLog is what the log says of one attempt.
type attemptLog struct {
	held, started, stopped, lost, returned, released int
	node                                             string
	hold                                             events.Hold
	outcome                                          events.Outcome
	// lostAt is the ce-time of its HoldLost: when RENT gave it up.
	lostAt time.Time
}

// jobLog is what the log says of one job.
type jobLog struct {
	// trail is every event of the job: type, ce-time and source, for
	// telling the story of a job that went wrong.
	trail                          []string
	requested, submitted, rejected int
	cancelled                      int // JobCancelled: ended before it was held
	attempts                       map[int]*attemptLog
	final                          int // final releases
	outcome                        events.Outcome
}

// logReport is a whole log read back.
type logReport struct {
	events int
	jobs   map[string]*jobLog
	// open is what each node still has held: ComputeHeld without its
	// ComputeReleased.
	open map[string]events.Hold
}

// readLog reads the whole E31 stream as it is now.
func readLog(ctx context.Context, t testing.TB, js jetstream.JetStream) *logReport {
	t.Helper()
	rep := &logReport{jobs: map[string]*jobLog{}, open: map[string]events.Hold{}}
	_, err := bus.Replay(ctx, js, bus.ReplayOptions{}, func(env events.Envelope) error {
		rep.add(env)
		return nil
	})
	if err != nil {
		t.Fatalf("read the log: %v", err)
	}
	return rep
}

func (r *logReport) add(env events.Envelope) {
	r.events++
	if s, err := events.ParseSubject(env.NATSSubject); err == nil && s.Space == events.SpaceNode {
		return
	}
	j := r.jobs[env.Subject]
	if j == nil {
		j = &jobLog{attempts: map[int]*attemptLog{}}
		r.jobs[env.Subject] = j
	}
	h, isHold := events.HoldOf(env.Event)
	var a *attemptLog
	if isHold {
		a = j.attempts[h.Attempt]
		if a == nil {
			a = &attemptLog{}
			j.attempts[h.Attempt] = a
		}
	}
	key := env.Subject + "/" + strconv.Itoa(h.Attempt)
	j.trail = append(j.trail, fmt.Sprintf("#%d %s %s %s", env.Seq, env.Time.Format("15:04:05.000"), events.Name(env.Type), env.Source))
	switch e := env.Event.(type) {
	case *events.JobRequested:
		j.requested++
	case *events.JobSubmitted:
		j.submitted++
	case *events.JobRejected:
		j.rejected++
		j.outcome = events.Rejected
	case *events.JobCancelled:
		j.cancelled++
		j.outcome = events.Cancelled
	case *events.ComputeHeld:
		a.held++
		a.node, a.hold = e.Node, e.Hold
		r.open[key] = e.Hold
	case *events.RunStarted:
		a.started++
	case *events.RunStopped:
		a.stopped++
		a.outcome = e.Outcome
		j.trail[len(j.trail)-1] += fmt.Sprintf(" (%s: %s)", e.Outcome, e.Reason)
	case *events.HoldLost:
		a.lost++
		a.lostAt = env.Time
	case *events.OutputReturned:
		a.returned++
		a.outcome = e.Outcome
	case *events.ComputeReleased:
		a.released++
		delete(r.open, key)
		if e.Final {
			j.final++
			j.outcome = e.Outcome
		}
	}
}

// readRan reads the trace jobs leave: how often each attempt really ran.
func readRan(t testing.TB, path string) map[attemptKey]int {
	t.Helper()
	ran := map[attemptKey]int{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return ran
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		job, attempt, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		n, err := strconv.Atoi(attempt)
		if !ok || err != nil {
			t.Errorf("trace file: line %q is not \"<job> <attempt>\"", sc.Text())
			continue
		}
		ran[attemptKey{job, n}]++
	}
	return ran
}

// tally is what a fault test reports.
type tally struct {
	jobs, succeeded, lostAttempts, unstartedLost, rerun int
	lost                                                int // jobs not over: must be zero
}

func (s tally) String() string {
	return fmt.Sprintf("%d jobs: %d succeeded, %d not over (lost); %d attempts lost with a node and held again (%d of them before they started); %d jobs ran more than once in one attempt",
		s.jobs, s.succeeded, s.lost, s.lostAttempts, s.unstartedLost, s.rerun)
}

// checkNothingLost checks, against the log and the trace jobs left in
// ranFile ("" when there is none), that every job in ids ended, each
// attempt was held, started, stopped and released at most once and
// released exactly once, only a lost node ever caused another attempt, no
// attempt ran twice or without its RunStarted, and nothing is still held on
// any node.
func checkNothingLost(ctx context.Context, t *testing.T, js jetstream.JetStream, ids []string, ranFile string) tally {
	t.Helper()
	rep := readLog(ctx, t, js)
	var ran map[attemptKey]int
	if ranFile != "" {
		ran = readRan(t, ranFile)
	}
	s := tally{jobs: len(ids)}
	errorf := func(format string, args ...any) {
		// Enough to see the pattern; the rest would only bury it.
		if t.Failed() && s.rerun+s.lost > 20 {
			return
		}
		t.Errorf(format, args...)
	}
	for _, id := range ids {
		j := rep.jobs[id]
		if j == nil || (j.final == 0 && j.rejected == 0) {
			s.lost++
			errorf("job %s: not over (%+v)", id, j)
			continue
		}
		if j.requested != 1 || j.submitted != 1 || j.rejected != 0 || j.final != 1 {
			errorf("job %s: %d requests, %d submitted, %d rejected, %d final releases; want 1, 1, 0, 1", id, j.requested, j.submitted, j.rejected, j.final)
		}
		if j.outcome == events.Succeeded {
			s.succeeded++
		} else if j.outcome != events.NodeLost {
			// A traced job succeeds wherever it runs; only losing its node
			// on every attempt may end it otherwise.
			errorf("job %s ended %s:\n  %s", id, j.outcome, strings.Join(j.trail, "\n  "))
		}
		n := len(j.attempts)
		for k, a := range j.attempts {
			if k < 1 || k > n {
				errorf("job %s: attempts are not numbered 1..%d: %d", id, n, k)
			}
			if a.held != 1 || a.released != 1 || a.started > 1 || a.stopped > 1 || a.returned > 1 || a.lost > 1 {
				errorf("job %s attempt %d: held %d, started %d, stopped %d, lost %d, returned %d, released %d times; want each once at most and held and released once",
					id, k, a.held, a.started, a.stopped, a.lost, a.returned, a.released)
			}
			if k < n {
				s.lostAttempts++
				if a.outcome != events.NodeLost && a.lost == 0 {
					errorf("job %s attempt %d ended %s, and only a lost node may cause another attempt", id, k, a.outcome)
				}
				if a.started == 0 {
					s.unstartedLost++
				}
			}
			if ran == nil {
				continue
			}
			r := ran[attemptKey{id, k}]
			if r > 1 {
				s.rerun++
				errorf("job %s attempt %d ran %d times", id, k, r)
			}
			if r > 0 && a.started == 0 {
				errorf("job %s attempt %d ran, and the log has no RunStarted for it", id, k)
			}
			if k == n && j.outcome == events.Succeeded && r != 1 {
				errorf("job %s succeeded on attempt %d, which ran %d times", id, k, r)
			}
		}
	}
	// One story of a lost attempt, to see how long finding out took.
	for _, id := range ids {
		if j := rep.jobs[id]; j != nil && len(j.attempts) > 1 {
			t.Logf("job %s, held again after a lost node:\n  %s", id, strings.Join(j.trail, "\n  "))
			break
		}
	}
	for key, h := range rep.open {
		errorf("attempt %s is still held on %s (%g cpu, %d bytes): never released", key, h.Node, h.CPU, h.MemoryBytes)
	}
	return s
}

// auditPasses runs `e31 audit` and fails the test unless it passes.
func auditPasses(t *testing.T, url string) {
	t.Helper()
	out, errOut, code := e31(t, url, "audit")
	if code != 0 {
		t.Errorf("e31 audit: exit %d\n%s%s", code, out, errOut)
		return
	}
	t.Logf("%s", strings.TrimSpace(out))
}
