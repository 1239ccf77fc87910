package hostile_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

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
	t.Cleanup(func() { _ = sub.Unsubscribe() }) // closing the connection ends it too
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
