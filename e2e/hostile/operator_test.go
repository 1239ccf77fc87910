package hostile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The names e31 publishes (README.md, SECURITY.md, the schemas' README).
const (
	logStream    = "E31"
	leasesBucket = "E31_LEASES"
)

// watcher is the operator's view of the system during the attacks: a
// subscription to every subject (the operator may subscribe to anything),
// which catches anything published on the subjects an attack aims at, and
// the operator's reads of the log, the leases and the stream's consumers.
// Only the operator reads the log here: mallory never can, and honest asks
// the ledger through the CLI.
type watcher struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	log jetstream.Stream
	kv  jetstream.KeyValue

	mu sync.Mutex
	// targets are the subjects being watched, each with what may
	// legitimately be published there while it is watched.
	targets map[string]func(*nats.Msg) bool
	// leaks are the messages on a target that its test did not allow.
	leaks []*nats.Msg
	// news is closed, and replaced, whenever something is published under
	// e31.job. or e31.node.: a reader waiting for a job's next event
	// reads the log again then.
	news chan struct{}
}

// newWatcher connects as the operator and subscribes to everything.
func newWatcher(t testing.TB) *watcher {
	t.Helper()
	w := &watcher{targets: map[string]func(*nats.Msg) bool{}, news: make(chan struct{})}
	w.nc = connect(t, operator)
	sub, err := w.nc.Subscribe(">", w.saw)
	if err != nil {
		t.Fatalf("operator: subscribe to everything: %v", err)
	}
	// Floods pass through here too: never drop a message for being slow.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if w.js, err = jetstream.New(w.nc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if w.log, err = w.js.Stream(ctx, logStream); err != nil {
		t.Fatalf("operator: the %s stream: %v", logStream, err)
	}
	if !w.log.CachedInfo().Config.AllowDirect {
		t.Fatalf("the %s stream does not allow direct gets: the operator's reads would need consumers", logStream)
	}
	if w.kv, err = w.js.KeyValue(ctx, leasesBucket); err != nil {
		t.Fatalf("operator: the %s bucket: %v", leasesBucket, err)
	}
	return w
}

// saw is the subscription's handler: it runs for every message published
// anywhere.
func (w *watcher) saw(m *nats.Msg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A consumer's delivery of a stored message reaches this
	// subscription too, under the message's own subject, with an ack
	// subject as its reply: that is not a publication.
	delivery := strings.HasPrefix(m.Reply, "$JS.ACK.")
	if legit, ok := w.targets[m.Subject]; ok && !delivery && !legit(m) {
		w.leaks = append(w.leaks, m)
	}
	if strings.HasPrefix(m.Subject, "e31.job.") || strings.HasPrefix(m.Subject, "e31.node.") {
		close(w.news)
		w.news = make(chan struct{})
	}
}

// watch starts catching what is published on subject that legit does not
// allow.
func (w *watcher) watch(subject string, legit func(*nats.Msg) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.targets[subject] = legit
}

// unwatch stops watching every subject and returns what leaked there.
func (w *watcher) unwatch(t testing.TB) []*nats.Msg {
	t.Helper()
	// Everything published before this call has reached the handler once
	// a round trip to the server is done.
	if err := w.nc.Flush(); err != nil {
		t.Errorf("operator: flush: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	leaks := w.leaks
	w.leaks = nil
	w.targets = map[string]func(*nats.Msg) bool{}
	return leaks
}

// anything allows nothing: no one has reason to publish on the subject.
func anything(*nats.Msg) bool { return false }

// lastSeq is the log's last sequence.
func (w *watcher) lastSeq(t testing.TB) uint64 {
	t.Helper()
	return w.info(t).State.LastSeq
}

// info is the log's stream info, asked of JetStream
// ($JS.API.STREAM.INFO.E31).
func (w *watcher) info(t testing.TB) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := w.log.Info(ctx)
	if err != nil {
		t.Fatalf("operator: %s stream info: %v", logStream, err)
	}
	return info
}

// consumers is how many consumers the log has, and what they read: the
// number of consumers on each filter, most first. It counts the consumers
// the server lists, whose names it reports: the stream's own count
// (State.Consumers) said 10 for seconds on end while the listing held 12,
// the services' five followers among them, pulling, and a baseline taken
// from it failed every aftermath after it.
func (w *watcher) consumers(t testing.TB) (int, string) {
	t.Helper()
	n := 0
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	byFilter := map[string]int{}
	var ephemeral []string
	list := w.log.ListConsumers(ctx)
	for c := range list.Info() {
		n++
		if c.Config.Durable == "" {
			// What an ephemeral consumer is, for the report of one that
			// stays: who made it and how far it read.
			ephemeral = append(ephemeral, fmt.Sprintf("%s made %s ago, delivered to #%d, %d pending, inactive after %s, %d waiting pulls",
				c.Name, time.Since(c.Created).Round(time.Second), c.Delivered.Stream, c.NumPending, c.Config.InactiveThreshold, c.NumWaiting))
		}
		f := strings.Trim(strings.Join(append([]string{c.Config.FilterSubject}, c.Config.FilterSubjects...), ","), ",")
		if f == "" {
			f = "everything"
		}
		if c.Config.Durable != "" {
			f += " (durable)"
		}
		byFilter[f]++
	}
	filters := slices.SortedFunc(maps.Keys(byFilter), func(a, b string) int { return byFilter[b] - byFilter[a] })
	var parts []string
	for _, f := range filters {
		parts = append(parts, fmt.Sprintf("%d on %s", byFilter[f], f))
	}
	if err := list.Err(); err != nil {
		t.Fatalf("operator: list the %s stream's consumers: %v", logStream, err)
	}
	slices.Sort(ephemeral)
	return n, strings.Join(parts, "; ") + "; the ephemeral: " + strings.Join(ephemeral, "; ")
}

// consumersGone waits until the log has at most want consumers, counting
// them again whenever the server advises that one of the log's consumers
// was deleted, and returns the count (and what they are) at that point or
// when patience runs out.
func (w *watcher) consumersGone(t testing.TB, want int, patience time.Duration) (int, string) {
	t.Helper()
	deleted, stop := w.advisories(t, "DELETED")
	defer stop()
	deadline := time.After(patience)
	for {
		n, names := w.consumers(t)
		if n <= want {
			return n, names
		}
		select {
		case <-deleted:
		case <-deadline:
			return n, names
		}
	}
}

// advisories are the server's advisories of kind (CREATED, DELETED, or *
// for any) about the log's consumers, from now until stop is called.
func (w *watcher) advisories(t testing.TB, kind string) (_ <-chan *nats.Msg, stop func()) {
	t.Helper()
	ch := make(chan *nats.Msg, 64)
	sub, err := w.nc.ChanSubscribe("$JS.EVENT.ADVISORY.CONSUMER."+kind+"."+logStream+".>", ch)
	if err == nil {
		err = w.nc.Flush()
	}
	if err != nil {
		t.Fatalf("watch the %s stream's consumers: %v", logStream, err)
	}
	return ch, func() { _ = sub.Unsubscribe() }
}

// settledConsumers is the log's consumer count, and what they are (as
// consumers says), once none has been made or deleted for a few seconds:
// what the services keep while nothing happens. Readers' ephemeral
// consumers go away on their own a few seconds after their last use, and
// a service's follower that missed its heartbeats (a server starved of
// CPU by the images' build) makes its consumer again: counted in between,
// the level at rest came out two short, and every aftermath then failed
// on the services' own consumers.
func (w *watcher) settledConsumers(t testing.TB) (int, string) {
	t.Helper()
	const quiet = 3 * time.Second
	changed, stop := w.advisories(t, "*")
	defer stop()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-changed: // quiet again from now
		case <-time.After(quiet):
			return w.consumers(t)
		case <-deadline:
			t.Log("the log's consumers were still being made or deleted after 30 s; counting them as they are")
			return w.consumers(t)
		}
	}
}

// stored is one message of the log, as the operator reads it with a
// direct get (no consumer).
type stored struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
}

// ceType is the event's type header.
func (s stored) ceType() string { return s.header.Get("ce-type") }

// String names the message in a failure.
func (s stored) String() string {
	return fmt.Sprintf("seq %d on %s (ce-type %q): %s", s.seq, s.subject, s.ceType(), clip(string(s.data), 200))
}

// jobEvents reads every message stored under e31.job.<job>.>, in order,
// with direct gets.
func (w *watcher) jobEvents(t testing.TB, job string) []stored {
	t.Helper()
	evs, err := w.readJob(job)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// readJob is jobEvents for a goroutine of a test, which may not end it.
func (w *watcher) readJob(job string) ([]stored, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []stored
	for seq := uint64(1); ; {
		m, err := w.log.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("e31.job."+job+".>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("operator: read the events of %s: %w", job, err)
		}
		out = append(out, stored{seq: m.Sequence, subject: m.Subject, header: m.Header, data: m.Data})
		seq = m.Sequence + 1
	}
}

// describe is a job's events, or why they could not be read, for a
// failure message.
func (w *watcher) describe(job string) string {
	evs, err := w.readJob(job)
	if err != nil {
		return err.Error()
	}
	return clip(journey(evs), 600)
}

// ending is how a job ended, from its events: "" while it is not over.
// A job is over once it has a JobRejected, a JobCancelled or a
// ComputeReleased with "final": true (pkg/events/schema/README.md);
// whatever anyone appends after that changes nothing.
func ending(evs []stored) string {
	for _, e := range evs {
		var body struct {
			Reason  string `json:"reason"`
			Outcome string `json:"outcome"`
			Final   bool   `json:"final"`
		}
		_ = json.Unmarshal(e.data, &body)
		// The type must be on its own subject: a "rejection" that
		// mallory stored on its request tail ends nothing.
		switch tok := token(e.subject); {
		case e.ceType() == typeRejected && tok == "rejected":
			return "rejected: " + body.Reason
		case e.ceType() == typeCancelled && tok == "cancelled":
			return "cancelled"
		case e.ceType() == typeReleased && tok == "released" && body.Final:
			return "released: " + body.Outcome
		}
	}
	return ""
}

// token is the fourth token of an event subject, which names its kind:
// "held" in e31.job.<job>.held.<node>.
func token(subject string) string {
	parts := strings.Split(subject, ".")
	if len(parts) < 4 {
		return ""
	}
	return parts[3]
}

// journey lists a job's events by the last tokens of their subjects, for a
// failure message: "requested.mallory, submitted, held.node-1, …".
func journey(evs []stored) string {
	var parts []string
	for _, e := range evs {
		tokens := strings.SplitN(e.subject, ".", 4)
		if len(tokens) == 4 {
			parts = append(parts, tokens[3])
		}
	}
	if len(parts) == 0 {
		return "no events"
	}
	return strings.Join(parts, ", ")
}

// waitFor reads job's events until done says they are enough, or d
// passes. It reads the log again whenever something is published on the
// job subjects, and at least every half second.
func (w *watcher) waitFor(t testing.TB, job string, d time.Duration, done func([]stored) bool) ([]stored, bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		news := w.news
		w.mu.Unlock()
		evs := w.jobEvents(t, job)
		if done(evs) {
			return evs, true
		}
		select {
		case <-news:
		case <-tick.C:
		case <-deadline.C:
			return w.jobEvents(t, job), false
		}
	}
}

// waitOver waits up to d for job to be over and says how it ended ("" if
// it did not) and what its events were.
func (w *watcher) waitOver(t testing.TB, job string, d time.Duration) (string, []stored) {
	t.Helper()
	evs, _ := w.waitFor(t, job, d, func(evs []stored) bool { return ending(evs) != "" })
	return ending(evs), evs
}

// has says whether a job's events include one of ceType.
func has(ceType string) func([]stored) bool {
	return func(evs []stored) bool {
		return slices.ContainsFunc(evs, func(e stored) bool { return e.ceType() == ceType })
	}
}

// node is the node a job was held on, from the subject of its
// ComputeHeld (e31.job.<job>.held.<node>).
func node(evs []stored) string {
	for _, e := range evs {
		if e.ceType() == typeHeld {
			parts := strings.Split(e.subject, ".")
			return parts[len(parts)-1]
		}
	}
	return ""
}

// leases is every key of the leases bucket and its value: who holds it.
func (w *watcher) leases(t testing.TB) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := w.kv.ListKeys(ctx)
	if err != nil {
		t.Fatalf("operator: list the leases: %v", err)
	}
	out := map[string]string{}
	for k := range keys.Keys() {
		e, err := w.kv.Get(ctx, k)
		if err != nil {
			continue // expired between the listing and the read
		}
		out[k] = string(e.Value())
	}
	return out
}

// mayWrite says whether user may publish on subject: a submitter's own
// tails (SECURITY.md: e31.job.*.requested.NAME, .cancel.NAME,
// .delete.NAME).
func mayWrite(user, subject string) bool {
	parts := strings.Split(subject, ".")
	return len(parts) == 5 && parts[0] == "e31" && parts[1] == "job" && parts[4] == user &&
		(parts[3] == "requested" || parts[3] == "cancel" || parts[3] == "delete")
}

// foreign lists what the log holds after seq that its owner did not
// write: a message that is not on a tail user may write must be an event
// (its CloudEvents headers, its ce-subject in its subject), and one of a
// type envelope.json knows must be under that type's subject. A service's
// reply to a query is none of these.
func (w *watcher) foreign(t testing.TB, after uint64, user string) []string {
	t.Helper()
	byType := map[string]eventKind{}
	for _, k := range kinds(t) {
		byType[k.ceType] = k
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var problems []string
	last := w.lastSeq(t)
	for seq := after + 1; seq <= last; seq++ {
		m, err := w.log.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("operator: read seq %d of the log: %v", seq, err)
		}
		s := stored{seq: m.Sequence, subject: m.Subject, header: m.Header, data: m.Data}
		if mayWrite(user, s.subject) {
			continue
		}
		parts := strings.Split(s.subject, ".")
		about := s.header.Get("ce-subject")
		switch {
		case s.ceType() == "" || s.header.Get("ce-specversion") == "" || s.header.Get("ce-id") == "":
			problems = append(problems, fmt.Sprintf("%s: not an event (no CloudEvents headers)", s))
		case len(parts) < 4 || parts[2] != about:
			problems = append(problems, fmt.Sprintf("%s: its ce-subject %q is not its subject's", s, about))
		default:
			if k, ok := byType[s.ceType()]; ok && (parts[1] != strings.Split(k.subject, ".")[1] || parts[3] != k.token()) {
				problems = append(problems, fmt.Sprintf("%s: a %s belongs on %s", s, s.ceType(), k.subject))
			}
		}
	}
	return problems
}
