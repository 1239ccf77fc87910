package hostile_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestHostileTenant runs every attack of issue 16 in turn against one
// e31, while honest runs jobs beside mallory; each attack ends with its
// aftermath (see aftermath). They share the system on purpose: what one
// attack left behind would show in the next.
func TestHostileTenant(t *testing.T) {
	s := &suite{w: newWatcher(t), mal: newTenant(t, mallory)}
	s.warm = runHonest(t, s.w, "warm-up", "warm-up")
	if t.Failed() {
		t.Fatal("the honest tenant's first job failed before any attack: nothing below would mean anything")
	}
	s.baseline = s.w.settledConsumers(t)
	t.Logf("before the attacks: %d consumers on the %s stream", s.baseline, logStream)

	t.Run("replies", s.replies)
	t.Run("garbage", s.garbage)
	t.Run("msgids", s.msgids)
	t.Run("flood", s.flood)
	t.Run("snooping", s.snooping)
	t.Run("image", s.image)
	t.Run("quotas", s.quotas)
}

// suite is what the attacks share: the operator's view, mallory's
// connection, honest's first job, and the log's consumer count at rest.
type suite struct {
	w    *watcher
	mal  *tenant
	warm honestJob
	// baseline is the log's consumer count with nothing going on, plus
	// any consumers the aftermaths' own audits left behind.
	baseline int
}

// replies sends a question to every query endpoint with a reply
// subject that names something else than mallory's inbox: a lease, an
// object of honest's bucket, every event subject of honest's running job,
// the JetStream API, honest's inbox. A service that answers there
// publishes with its own rights, on a subject mallory may not publish on.
// Nothing may be published on any of them.
func (s *suite) replies(t *testing.T) {
	w, mal := s.w, s.mal
	running := submitHonest(t, "running-during-replies", 8*time.Second)
	own := mal.submit(t, "replies-own", quick("replies-own"))
	evs, ok := w.waitFor(t, running.id, 30*time.Second, has(typeStarted))
	if !ok {
		t.Fatalf("honest's job %s did not start within 30 s, before any attack: %s", running.id, journey(evs))
	}
	nodeName := node(evs)
	if end, evs := w.waitOver(t, own, 30*time.Second); end == "" {
		t.Fatalf("mallory's job %s did not end within 30 s, before any attack: %s", own, journey(evs))
	}

	type target struct {
		subject string
		legit   func(*nats.Msg) bool
	}
	var targets []target
	// Leases: the node that runs honest's job, and the scheduler's.
	// Their owners renew them with the same value.
	leases := w.leases(t)
	for _, key := range []string{"node." + nodeName, "leader.rent"} {
		owner, ok := leases[key]
		if !ok {
			t.Fatalf("no lease %s in %s (leases: %v)", key, leasesBucket, leases)
		}
		targets = append(targets, target{"$KV." + leasesBucket + "." + key, func(m *nats.Msg) bool { return string(m.Data) == owner }})
	}
	// honest's bucket: a name of nothing, and the metadata of the input
	// the warm-up job staged (which no one rewrites while it is stored).
	bucket := "E31_DATA_" + honest
	staged := w.objects(t, bucket)[0]
	targets = append(targets,
		target{"$O." + bucket + ".M.x", anything},
		target{"$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(staged)), anything})
	// Every event subject of honest's running job (and of its node): only
	// that type's event belongs there.
	for _, k := range kinds(t) {
		about := running.id
		if strings.HasPrefix(k.subject, "e31.node.") {
			about = nodeName
		}
		targets = append(targets, target{k.subjectFor(about, nodeName, honest), func(m *nats.Msg) bool { return m.Header.Get("ce-type") == k.ceType }})
	}
	// The JetStream API: a request there carries its own reply subject;
	// an answer forwarded there has none.
	targets = append(targets, target{"$JS.API.STREAM.INFO." + logStream, func(m *nats.Msg) bool { return m.Reply != "" }})
	// Another tenant's inbox.
	targets = append(targets, target{"_INBOX_submitter_" + honest + ".x", anything})

	endpoints := []struct {
		name string
		q    any
	}{
		{"ledger.record", map[string]any{"job": own}},
		{"ledger.list", map[string]any{}},
		{"ledger.totals", map[string]any{}},
		{"ledger.events", map[string]any{"job": own}},
		{"ledger.head", map[string]any{}},
		{"rent.why", map[string]any{"job": own}},
		{"output.stored", map[string]any{}},
	}
	before := w.lastSeq(t)
	for _, e := range endpoints {
		t.Run(e.name, func(t *testing.T) {
			for _, tg := range targets {
				w.watch(tg.subject, tg.legit)
			}
			for _, tg := range targets {
				if err := mal.nc.PublishMsg(&nats.Msg{Subject: mal.api(e.name), Reply: tg.subject, Data: mustJSON(e.q)}); err != nil {
					t.Fatalf("mallory: publish to %s: %v", mal.api(e.name), err)
				}
			}
			// A question of mallory's own, answered, shows the endpoint
			// has read the attack's requests; a moment more lets answers
			// handled concurrently go out.
			if err := mal.askPatiently(e.name, e.q, nil); err != nil {
				t.Errorf("%s did not answer mallory's own question with its own inbox: %v", mal.api(e.name), err)
			}
			time.Sleep(500 * time.Millisecond) // waiting for the absence of a message: there is no event to wait on
			if leaks := w.unwatch(t); len(leaks) > 0 {
				var where []string
				for _, m := range leaks {
					if !slices.Contains(where, m.Subject) {
						where = append(where, m.Subject)
					}
				}
				t.Errorf("mallory asked %s with the reply subject of something else, and e31 published its answer there, on %d of %d targets: %s; "+
					"the first, %d bytes on %s: %s", mal.api(e.name), len(where), len(targets), strings.Join(where, ", "),
					len(leaks[0].Data), leaks[0].Subject, clip(string(leaks[0].Data), 200))
			}
		})
	}

	if refused := mal.takeRefusals(); len(refused) > 0 {
		t.Logf("the server itself refused %d of mallory's publishes, e.g.: %v", len(refused), refused[0])
	}
	after := w.leases(t)
	for _, key := range []string{"node." + nodeName, "leader.rent"} {
		if after[key] != leases[key] {
			t.Errorf("the lease %s is now held by %q, was %q: a reply overwrote it", key, after[key], leases[key])
		}
	}
	if err := w.readObject(t, bucket, staged); err != nil {
		t.Errorf("after the reply attack honest's staged object %s cannot be read: %v", staged, err)
	}
	aftermath(t, s, "replies", before, running)
}

// reportForeign fails t with what the log holds that its owner did not
// write, the first few in full.
func reportForeign(t *testing.T, attack string, problems []string) {
	t.Helper()
	const shown = 5
	for i, p := range problems {
		if i == shown {
			t.Errorf("%s: the log holds %d more messages their owners did not write", attack, len(problems)-shown)
			break
		}
		t.Errorf("%s: the log holds what its owner did not write: %s", attack, p)
	}
}

// objects is the names of the objects in bucket, as the operator lists
// them.
func (w *watcher) objects(t testing.TB, bucket string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := w.js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatalf("operator: open %s: %v", bucket, err)
	}
	list, err := obs.List(ctx)
	if err != nil || len(list) == 0 {
		t.Fatalf("operator: %s holds no object after honest staged one: %v", bucket, err)
	}
	var names []string
	for _, o := range list {
		names = append(names, o.Name)
	}
	return names
}

// readObject reads one object of bucket whole, as the operator: an
// object whose metadata was overwritten no longer reads.
func (w *watcher) readObject(t testing.TB, bucket, name string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obs, err := w.js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatalf("operator: open %s: %v", bucket, err)
	}
	_, err = obs.GetBytes(ctx, name)
	return err
}

// garbage is one body mallory publishes on one of its tails.
type garbage struct {
	name   string
	header map[string]string
	data   []byte
}

// garbageFor is everything mallory publishes on its tail of job
// ("requested", "cancel" or "delete"): junk, bodies at and over the
// bounds, wrong types, events it does not own, and forged identities.
func garbageFor(t testing.TB, tail, job, nodeName string) []garbage {
	t.Helper()
	tailType := map[string]string{"requested": typeRequested, "cancel": typeCancel, "delete": typeDelete}[tail]
	seq := 0
	ownID := func() map[string]string {
		seq++
		return headers(tailType, job, fmt.Sprintf("%s/%s/x%d", job, tail, seq))
	}
	junk := make([]byte, 200)
	_, _ = rand.Read(junk)
	padded := func(size int) []byte {
		return append(append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), size-8)...), '"', '}')
	}
	released := example(t, typeReleased)
	released["node"] = nodeName
	submitted := example(t, typeSubmitted)
	submitted["submitter"] = mallory

	gs := []garbage{
		{"junk bytes, no headers", nil, junk},
		{"junk under event headers", ownID(), junk},
		{"a body just under the log's 256 KiB bound", ownID(), padded(256<<10 - 512)},
		{"a body just under 1 MiB", ownID(), padded(1<<20 - 4096)},
		{"a body over 1 MiB", ownID(), padded(1<<20 + 1)},
		{"JSON null", ownID(), []byte("null")},
		{"a JSON array", ownID(), []byte("[1,2,3]")},
		{"a ComputeReleased body under its ce-type", headers(typeReleased, job, job+"/released/7"), mustJSON(released)},
		{"a JobSubmitted body under its ce-type, with its id", headers(typeSubmitted, job, job+"/submitted"), mustJSON(submitted)},
	}
	switch tail {
	case "requested":
		gs = append(gs,
			garbage{"a request with wrong types", ownID(), []byte(`{"submitter": 7, "spec": "everything"}`)},
			garbage{"a request forged as honest's", ownID(), mustJSON(map[string]any{"submitter": honest, "spec": quick("forged")})})
	case "cancel":
		gs = append(gs,
			garbage{"a cancel with wrong types", ownID(), []byte(`{"by": 7, "reason": ["x"]}`)},
			garbage{"a cancel forged as honest's", ownID(), mustJSON(map[string]any{"by": honest})},
			garbage{"a cancel forged as the operator's", ownID(), mustJSON(map[string]any{"by": operator})},
			garbage{"a cancel of its own", headers(typeCancel, job, job+"/cancel"), mustJSON(map[string]any{"by": mallory})})
	case "delete":
		gs = append(gs,
			garbage{"a delete with wrong types", ownID(), []byte(`{"what": 5, "by": ["mallory"]}`)},
			garbage{"a delete forged as honest's", ownID(), mustJSON(map[string]any{"what": "all", "by": honest})},
			garbage{"a delete forged as the operator's", ownID(), mustJSON(map[string]any{"what": "all", "by": operator})},
			garbage{"a delete of its own", headers(typeDelete, job, job+"/delete/all"), mustJSON(map[string]any{"what": "all", "by": mallory})})
	}
	return gs
}

// garbage publishes everything mallory may publish on its tails
// (e31.job.<id>.requested|cancel|delete.mallory) of honest's running job,
// honest's finished one, its own running job and a job id nobody used:
// none of it may stop a job, change honest's output, or leave in the log
// anything mallory could not write.
func (s *suite) garbage(t *testing.T) {
	w, mal, warm := s.w, s.mal, s.warm
	running := submitHonest(t, "running-during-garbage", 6*time.Second)
	own := mal.submit(t, "garbage-own", spec("garbage-own", `sleep 4; echo ok > "$E31_OUTPUT/out.txt"`, 0.25, time.Minute))
	var nodeName string
	for _, job := range []string{running.id, own} {
		evs, ok := w.waitFor(t, job, 30*time.Second, has(typeStarted))
		if !ok {
			t.Fatalf("job %s did not start within 30 s, before any attack: %s", job, journey(evs))
		}
		nodeName = node(evs)
	}
	targets := []struct{ what, job string }{
		{"honest's running job", running.id},
		{"honest's finished job", warm.id},
		{"mallory's running job", own},
		{"a job id nobody used", newID("garbage-fresh")},
	}
	before := w.lastSeq(t)
	type result struct {
		stored  int
		refused map[string]int
	}
	results := map[string]*result{}
	for _, tg := range targets {
		for _, tail := range []string{"requested", "cancel", "delete"} {
			for _, g := range garbageFor(t, tail, tg.job, nodeName) {
				r := results[g.name]
				if r == nil {
					r = &result{refused: map[string]int{}}
					results[g.name] = r
				}
				err := mal.publish("e31.job."+tg.job+"."+tail+"."+mallory, g.header, g.data)
				if err != nil {
					r.refused[clip(err.Error(), 80)]++
					continue
				}
				r.stored++
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(results)) {
		r := results[name]
		t.Logf("%-55s stored %2d, refused %v", name+":", r.stored, r.refused)
	}
	if !mal.nc.IsConnected() {
		t.Errorf("mallory's connection was closed by its own publishes: %v", mal.nc.LastError())
	}

	// Every job it aimed at still ends, and ends as it would have.
	if end, evs := w.waitOver(t, own, honestWait); end == "" {
		t.Errorf("mallory's own job %s never ended after the garbage on its tails: it froze (events: %s)", own, journey(evs))
	} else {
		t.Logf("mallory's own job: %s", end)
	}
	warm.checkOutput(t, "garbage")
	aftermath(t, s, "garbage", before, running)
}

// msgids has mallory store, on its own request tail of honest's running
// job, the events the job's services will record next (RunStopped,
// OutputReturned, ComputeReleased), each under the ce-id and Nats-Msg-Id
// envelope.json says its owner will give it. JetStream drops a message
// whose Nats-Msg-Id it stored within its duplicate window (two minutes):
// unless e31 tells the two apart, the real events are taken for repeats
// of mallory's and never stored, and the job never ends.
func (s *suite) msgids(t *testing.T) {
	w, mal := s.w, s.mal
	running := submitHonest(t, "running-during-msgids", 6*time.Second)
	evs, ok := w.waitFor(t, running.id, 30*time.Second, has(typeStarted))
	if !ok {
		t.Fatalf("honest's job %s did not start within 30 s, before any attack: %s", running.id, journey(evs))
	}
	job, nodeName := running.id, node(evs)
	before := w.lastSeq(t)
	for _, ceType := range []string{typeStopped, typeReturned, typeReleased} {
		body := example(t, ceType)
		if _, ok := body["node"]; ok {
			body["node"] = nodeName
		}
		id := fmt.Sprintf("%s/%s/1", job, kindOf(t, ceType).token())
		if err := mal.publish(kindOf(t, typeRequested).subjectFor(job, "", mallory), headers(ceType, job, id), mustJSON(body)); err != nil {
			t.Logf("mallory's %s with the id %s was refused: %v", ceType, id, err)
		}
	}
	aftermath(t, s, "msgids", before, running)
}

// flood has mallory hold 50 long polls open, then send a burst of
// quick questions, while honest asks about its job as `e31 status` does.
// Honest must be answered fast (p99 within 100 ms), and mallory beyond its
// limits must be told it is busy.
func (s *suite) flood(t *testing.T) {
	w, mal, warm := s.w, s.mal, s.warm
	before := w.lastSeq(t)
	const polls, burst = 50, 200
	waiting := mal.submit(t, "flood-waits", stuck("flood-waits"))
	if reason, ok := accepted(t, w, waiting); !ok {
		t.Fatalf("mallory's job %s, waiting for a node of 64 cpu, was rejected: %s", waiting, reason)
	}
	// Once over, the job ends every long poll on it.
	stopWaiting := sync.OnceFunc(func() {
		mal.cancel(t, waiting)
		if end, evs := w.waitOver(t, waiting, 30*time.Second); end == "" {
			t.Errorf("mallory's job %s did not end within 30 s of its cancel: %s", waiting, journey(evs))
		}
	})
	defer stopWaiting()

	flood := newTenant(t, mallory)
	var mu sync.Mutex
	answers := map[string][]byte{}
	burstAnswered := 0
	allBurst := make(chan struct{})
	sub, err := flood.nc.Subscribe(flood.inbox+".flood.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		answers[m.Subject] = m.Data
		if strings.Contains(m.Subject, ".flood.burst.") {
			if burstAnswered++; burstAnswered == burst {
				close(allBurst)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	poll := mustJSON(map[string]any{"job": waiting, "until_over": true, "wait": int64(30 * time.Second)})
	for i := range polls {
		if err := flood.nc.PublishRequest(flood.api("ledger.record"), fmt.Sprintf("%s.flood.poll.%d", flood.inbox, i), poll); err != nil {
			t.Fatal(err)
		}
	}
	if err := flood.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// honest, meanwhile, asks what `e31 status` asks: its record, fresh,
	// and the scheduler's why.
	hon := newTenant(t, honest)
	const samples, budget, timeout = 100, 10 * time.Second, time.Second
	var took []time.Duration
	var failures []string
	start := time.Now()
	for i := 0; i < samples && time.Since(start) < budget; i++ {
		endpoint, q := "ledger.record", map[string]any{"job": warm.id, "fresh": true}
		if i%2 == 1 {
			endpoint, q = "rent.why", map[string]any{"job": warm.id}
		}
		t0 := time.Now()
		err := hon.ask(endpoint, q, nil, timeout)
		took = append(took, time.Since(t0))
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", endpoint, err))
		}
	}
	slices.Sort(took)
	p50, p99 := took[len(took)/2], took[(len(took)*99+99)/100-1]
	t.Logf("honest's queries under %d long polls of mallory's: %d in %s, p50 %s, p99 %s, max %s, %d failed",
		polls, len(took), time.Since(start).Round(time.Millisecond), p50.Round(time.Microsecond), p99.Round(time.Microsecond),
		took[len(took)-1].Round(time.Microsecond), len(failures))
	if p99 > 100*time.Millisecond {
		t.Errorf("under %d long polls of mallory's, honest's queries took %s at p99 (want ≤ 100ms); %d of %d failed: %s",
			polls, p99.Round(time.Millisecond), len(failures), len(took), clip(strings.Join(failures, "; "), 300))
	} else if len(failures) > 0 {
		t.Errorf("under %d long polls of mallory's, %d of honest's %d queries failed: %s", polls, len(failures), len(took), clip(strings.Join(failures, "; "), 300))
	}
	if r := e31(t, honest, 5*time.Second, "status", warm.id, "--json"); r.err != nil || !strings.Contains(r.stdout, `"released"`) {
		t.Errorf("under %d long polls of mallory's, honest's `e31 status %s` did not answer: %s", polls, warm.id, r)
	}

	// Beyond the long polls, a burst of quick questions: past mallory's
	// limits, the answer is "busy", at once.
	for i := range burst {
		if err := flood.nc.PublishRequest(flood.api("ledger.list"), fmt.Sprintf("%s.flood.burst.%d", flood.inbox, i), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if err := flood.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-allBurst:
	case <-time.After(10 * time.Second):
	}
	mu.Lock()
	var busy, pollAnswered int
	for subject, data := range answers {
		if code(data) == "busy" {
			busy++
		}
		if strings.Contains(subject, ".flood.poll.") {
			pollAnswered++
		}
	}
	answered := burstAnswered
	mu.Unlock()
	t.Logf("mallory's flood: %d of %d long polls and %d of %d quick questions answered so far, %d of them busy",
		pollAnswered, polls, answered, burst, busy)
	if busy == 0 {
		t.Errorf("mallory held %d long polls and sent %d more questions at once, and none was answered busy (%d answered): no limit per asker",
			polls, burst, pollAnswered+answered)
	}
	stopWaiting()
	aftermath(t, s, "flood", before)
}

// snooping has mallory ask every endpoint what it may ask, and looks for
// anything about other tenants in the answers (SECURITY.md: a submitter
// learns nothing of other tenants, no counts, sequences or ids): honest's
// name or job ids anywhere, the ledger head's counts and sequence, the
// scheduler's count of every queued job.
func (s *suite) snooping(t *testing.T) {
	w, mal := s.w, s.mal
	before := w.lastSeq(t)
	waiting := mal.submit(t, "snooping-waits", stuck("snooping-waits"))
	if reason, ok := accepted(t, w, waiting); !ok {
		t.Fatalf("mallory's job %s, waiting for a node of 64 cpu, was rejected: %s", waiting, reason)
	}
	questions := []struct {
		endpoint string
		q        any
	}{
		{"ledger.head", map[string]any{}},
		{"ledger.list", map[string]any{}},
		{"ledger.totals", map[string]any{}},
		{"ledger.record", map[string]any{"job": s.warm.id}},
		{"ledger.events", map[string]any{"job": s.warm.id}},
		{"rent.why", map[string]any{"job": waiting}},
		{"rent.why", map[string]any{"job": s.warm.id}},
		{"output.stored", map[string]any{}},
		{"output.stored", map[string]any{"submitter": honest}},
	}
	for _, q := range questions {
		var answer map[string]any
		if err := mal.askPatiently(q.endpoint, q.q, &answer); err != nil {
			t.Errorf("%s did not answer mallory: %v", mal.api(q.endpoint), err)
			continue
		}
		raw, asked := string(mustJSON(answer)), string(mustJSON(q.q))
		// An answer may repeat what the question named (an error about
		// "job X"), never tell more.
		for _, secret := range []string{honest, s.warm.id} {
			if strings.Contains(raw, secret) && !strings.Contains(asked, secret) {
				t.Errorf("mallory asked %s %s and was told of honest: %s", mal.api(q.endpoint), asked, clip(raw, 300))
			}
		}
		if strings.Contains(asked, honest) {
			// Refused, or answered about mallory's own jobs: any job of
			// honest's would name honest as its submitter.
			jobs, _ := answer["jobs"].([]any)
			for _, j := range jobs {
				job, _ := j.(map[string]any)
				if sub, _ := job["submitter"].(string); sub != mallory {
					t.Errorf("mallory asked %s %s and was told of a job of %q: %s", mal.api(q.endpoint), asked, sub, clip(raw, 300))
				}
			}
		}
		if strings.Contains(asked, s.warm.id) {
			events, _ := answer["events"].([]any)
			state, _ := answer["state"].(string)
			if answer["record"] != nil || len(events) > 0 || (state != "" && state != "unknown") {
				t.Errorf("mallory asked %s about honest's job and was told of it: %s", mal.api(q.endpoint), clip(raw, 300))
			}
		}
		switch q.endpoint {
		case "ledger.head":
			head, _ := answer["head"].(map[string]any)
			for _, f := range []any{answer["records"], answer["last_seq"], answer["behind"], head["seq"]} {
				if n, ok := f.(float64); ok && n > 0 {
					t.Errorf("mallory asked %s and was told the log's counts or sequence: %s", mal.api(q.endpoint), clip(raw, 300))
					break
				}
			}
		case "rent.why":
			if n, ok := answer["queued"].(float64); ok && n > 0 {
				t.Errorf("mallory asked %s %s and was told how many jobs wait in all: %s", mal.api(q.endpoint), asked, clip(raw, 300))
			}
		}
	}
	mal.cancel(t, waiting)
	if end, evs := w.waitOver(t, waiting, 30*time.Second); end == "" {
		t.Errorf("mallory's job %s did not end within 30 s of its cancel: %s", waiting, journey(evs))
	}
	aftermath(t, s, "snooping", before)
}

// image asks for a container image the operator allowed no one:
// SUBMIT must reject the job and say the image is not allowed.
func (s *suite) image(t *testing.T) {
	w, mal := s.w, s.mal
	before := w.lastSeq(t)
	sp := quick("image")
	sp["work"].(map[string]any)["image"] = "some-image:latest"
	job := mal.submit(t, "image", sp)
	end, evs := w.waitOver(t, job, 30*time.Second)
	switch {
	case end == "":
		mal.cancel(t, job)
		w.waitOver(t, job, 30*time.Second)
		t.Errorf("a job of mallory's naming image some-image:latest was not rejected within 30 s; it went %s", journey(evs))
	case !strings.HasPrefix(end, "rejected") || !strings.Contains(end, "not allowed"):
		t.Errorf("a job of mallory's naming image some-image:latest ended %q (%s), want rejected as not allowed", end, journey(evs))
	default:
		t.Logf("image some-image:latest: %s", end)
	}
	aftermath(t, s, "image", before)
}

// Mallory's quotas, as the operator sets them.
const (
	maxData   = 10 << 20
	maxQueued = 5
	maxRate   = 30 // a minute
)

// quotas has the operator set mallory's quotas, then mallory go past
// each: data beyond max-data is not stored, the job past max-queued and
// those past max-rate are rejected naming the limit, and what was
// accepted before stays.
func (s *suite) quotas(t *testing.T) {
	w, mal := s.w, s.mal
	before := w.lastSeq(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bucket, err := mal.js.ObjectStore(ctx, "E31_DATA_"+mallory)
	if err != nil {
		t.Fatalf("mallory: open its own bucket: %v", err)
	}
	kept := []byte("staged by mallory before its quotas were set\n")
	if _, err := bucket.PutBytes(ctx, "kept", kept); err != nil {
		t.Fatalf("mallory: store an object in its own bucket: %v", err)
	}

	args := []string{"setup", "--submitter", mallory, "--max-data", "10MiB", "--max-queued", fmt.Sprint(maxQueued), "--max-rate", fmt.Sprint(maxRate)}
	if r := e31(t, operator, 2*time.Minute, args...); r.err != nil {
		t.Fatalf("the operator could not set mallory's quotas with `e31 %s`: %s", strings.Join(args, " "), r)
	}

	t.Run("max-data", func(t *testing.T) {
		big := make([]byte, maxData+1<<20)
		_, _ = rand.Read(big)
		if _, err := bucket.PutBytes(ctx, "too-big", big); err == nil {
			t.Errorf("mallory stored %d MiB in its bucket, past its max-data of 10 MiB", len(big)>>20)
			_ = bucket.Delete(ctx, "too-big")
		} else {
			t.Logf("11 MiB into mallory's bucket: %v", err)
		}
		// The same through the CLI: staging fails, and no job is made.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "big.bin"), big[:maxData+1<<19], 0o644); err != nil {
			t.Fatal(err)
		}
		job := `name: too-much-data
work:
  command: ["/bin/sh", "-c", "wc -c \"$E31_DATA/big\" > \"$E31_OUTPUT/out.txt\""]
data:
  - name: big
    path: ./big.bin
request:
  cpu: 0.1
  memory: 64MiB
  limit: 1m
output:
  - out.txt
`
		if err := os.WriteFile(filepath.Join(dir, "job.yaml"), []byte(job), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := e31(t, mallory, time.Minute, "submit", filepath.Join(dir, "job.yaml"), "--json", "--quiet"); r.err == nil {
			t.Errorf("mallory submitted a job staging 10.5 MiB past its max-data of 10 MiB: %s", r)
		} else {
			t.Logf("e31 submit of 10.5 MiB: %s", clip(strings.TrimSpace(r.stderr), 300))
		}
		got, err := bucket.GetBytes(ctx, "kept")
		if err != nil || !bytes.Equal(got, kept) {
			t.Errorf("what mallory stored before its quota was lost: %q, %v", got, err)
		}
	})

	t.Run("max-queued", func(t *testing.T) {
		var queued []string
		defer func() {
			for _, job := range queued {
				mal.cancel(t, job)
			}
			for _, job := range queued {
				if end, evs := w.waitOver(t, job, 30*time.Second); end == "" {
					t.Errorf("mallory's queued job %s did not end within 30 s of its cancel: %s", job, journey(evs))
				}
			}
		}()
		for i := range maxQueued + 1 {
			job := mal.submit(t, fmt.Sprintf("queued-%d", i), stuck(fmt.Sprintf("queued-%d", i)))
			reason, ok := accepted(t, w, job)
			switch {
			case ok:
				queued = append(queued, job)
				if i == maxQueued {
					t.Errorf("mallory's job number %d was accepted with %d of its jobs queued, past its max-queued of %d", i+1, maxQueued, maxQueued)
				}
			case i < maxQueued:
				t.Errorf("mallory's job number %d was rejected with %d queued, within its max-queued of %d: %s", i+1, i, maxQueued, reason)
			case !strings.Contains(reason, "max-queued"):
				t.Errorf("mallory's job number %d, past max-queued, was rejected for %q, which does not name max-queued", i+1, reason)
			default:
				t.Logf("job %d of mallory's: rejected: %s", i+1, reason)
			}
		}
		for _, job := range queued {
			if end := ending(w.jobEvents(t, job)); end != "" {
				t.Errorf("mallory's queued job %s, accepted before the limit was reached, ended: %s", job, end)
			}
		}
	})

	t.Run("max-rate", func(t *testing.T) {
		// Few jobs in flight at once, so that only the rate can refuse
		// one: each is a quick job, waited for before the next when two
		// are running.
		var ok, inFlight []string
		var refusal string
		start := time.Now()
		for i := 0; i < 2*maxRate && time.Since(start) < 50*time.Second; i++ {
			for len(inFlight) >= 2 {
				w.waitOver(t, inFlight[0], 30*time.Second)
				inFlight = inFlight[1:]
			}
			job := mal.submit(t, fmt.Sprintf("rate-%d", i), quick(fmt.Sprintf("rate-%d", i)))
			reason, ok2 := accepted(t, w, job)
			if ok2 {
				ok = append(ok, job)
				inFlight = append(inFlight, job)
				continue
			}
			if !strings.Contains(reason, "max-rate") {
				t.Errorf("mallory's submission %d of a burst was rejected for %q, which does not name max-rate", i+1, reason)
			}
			refusal = reason
			break
		}
		took := time.Since(start)
		if refusal == "" {
			t.Errorf("mallory had %d jobs accepted in %s, past a max-rate of %d a minute, and none was refused", len(ok), took.Round(time.Second), maxRate)
		} else {
			t.Logf("after %d accepted in %s: rejected: %s", len(ok), took.Round(time.Second), refusal)
		}
		if len(ok) > maxRate {
			t.Errorf("mallory had %d jobs accepted in %s, past its max-rate of %d a minute", len(ok), took.Round(time.Second), maxRate)
		}
		for _, job := range ok {
			if end, evs := w.waitOver(t, job, 30*time.Second); end != "released: succeeded" {
				t.Errorf("mallory's job %s, accepted within its rate, ended %q: %s", job, end, journey(evs))
			}
		}
	})
	aftermath(t, s, "quotas", before)
}
