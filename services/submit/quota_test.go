package submit_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/submit"
)

// clock is a time the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// startLimited starts SUBMIT as Run does, reading its limits from the
// bucket, with policy written for alice first.
func startLimited(t *testing.T, alice limits.Policy, def limits.Policy) (*fixture, *clock) {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	kv, err := limits.Setup(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	for key, p := range map[string]limits.Policy{limits.Key("alice"): alice, limits.DefaultKey: def} {
		if _, err := limits.Change(ctx, kv, key, func(have *limits.Policy) { *have = p }); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	book, err := limits.Watch(wctx, js)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-book.Done() })
	obs, err := js.ObjectStore(ctx, events.DataBucket)
	if err != nil {
		t.Fatal(err)
	}
	store := stage.NewObjectStore(obs)
	clk := &clock{t: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)}
	svc, err := submit.New(js, submit.Config{Store: store, Logger: slog.New(slog.DiscardHandler), Limits: book, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/cli", nil), store: store, submit: svc}, clk
}

func ptr[T any](v T) *T { return &v }

// stillSubmitted fails unless each job's last event is its JobSubmitted:
// a rejection of a later request took nothing from it.
func (f *fixture) stillSubmitted(t *testing.T, jobs ...string) {
	t.Helper()
	for _, job := range jobs {
		h, err := bus.ReadJob(f.ctx, f.js, job, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := h[len(h)-1].Event.(*events.JobSubmitted); !ok || len(h) != 2 {
			t.Errorf("%s: history %v, want its request and JobSubmitted", job, h)
		}
	}
}

func TestAJobBeyondMaxQueuedIsRejectedNamingTheLimit(t *testing.T) {
	t.Parallel()
	f, _ := startLimited(t, limits.Policy{MaxQueued: ptr(3)}, limits.Policy{})
	var accepted []string
	for _, job := range []string{"a1", "a2", "a3"} {
		theOne[events.JobSubmitted](t, f.decided(t, f.request(t, job, "alice", validSpec())))
		accepted = append(accepted, job)
	}
	rej := theOne[events.JobRejected](t, f.decided(t, f.request(t, "a4", "alice", validSpec())))
	if want := "quota: alice may have at most 3 jobs queued (max-queued), 3 are"; rej.Reason != want {
		t.Fatalf("reason %q, want %q", rej.Reason, want)
	}
	f.stillSubmitted(t, accepted...)
	// Another submitter's queue is its own.
	theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "b1", "bob", validSpec())))
	// Once one of alice's jobs is over, she has room again.
	if _, err := f.pub.Append(f.ctx, "a1", &events.JobCancelled{}); err != nil {
		t.Fatal(err)
	}
	theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "a5", "alice", validSpec())))
}

func TestAJobBeyondMaxRateIsRejectedNamingTheLimit(t *testing.T) {
	t.Parallel()
	f, clk := startLimited(t, limits.Policy{}, limits.Policy{MaxRate: ptr(2)})
	theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "a1", "alice", validSpec())))
	clk.Add(30 * time.Second)
	theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "a2", "alice", validSpec())))
	rej := theOne[events.JobRejected](t, f.decided(t, f.request(t, "a3", "alice", validSpec())))
	if want := "quota: alice may submit at most 2 jobs a minute (max-rate), 2 were in the last minute"; rej.Reason != want {
		t.Fatalf("reason %q, want %q", rej.Reason, want)
	}
	f.stillSubmitted(t, "a1", "a2")
	// A minute after the first, one more fits.
	clk.Add(31 * time.Second)
	theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "a4", "alice", validSpec())))
	rej = theOne[events.JobRejected](t, f.decided(t, f.request(t, "a5", "alice", validSpec())))
	if !strings.Contains(rej.Reason, "(max-rate)") {
		t.Fatalf("reason %q does not name max-rate", rej.Reason)
	}
}

// TestConcurrentRequestsNeverPassTheLimit decides a burst of requests at
// once, as SUBMIT's lanes do: however they interleave, exactly the limit
// is admitted.
func TestConcurrentRequestsNeverPassTheLimit(t *testing.T) {
	t.Parallel()
	f, _ := startLimited(t, limits.Policy{MaxQueued: ptr(5)}, limits.Policy{})
	reqs := make([]events.Envelope, 40)
	for i := range reqs {
		reqs[i] = f.request(t, fmt.Sprintf("a%d", i), "alice", validSpec())
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(reqs))
	for _, r := range reqs {
		wg.Go(func() { errs <- f.submit.Handle(f.ctx, r) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	admitted := 0
	for _, r := range reqs {
		h, err := bus.ReadJob(f.ctx, f.js, r.Subject, r.Seq+1)
		if err != nil {
			t.Fatal(err)
		}
		if len(h) != 1 {
			t.Fatalf("%s: %v after its request, want one decision", r.Subject, h)
		}
		if _, ok := h[0].Event.(*events.JobSubmitted); ok {
			admitted++
		}
	}
	if admitted != 5 {
		t.Fatalf("%d of %d concurrent requests admitted with max-queued 5", admitted, len(reqs))
	}
}

func TestADisallowedImageIsRejectedWithTheReason(t *testing.T) {
	t.Parallel()
	f, _ := startLimited(t, limits.Policy{Images: []string{"alice/private:1"}}, limits.Policy{Images: []string{"e31/base:1"}})
	spec := validSpec()
	spec.Work.Image = "e31/base:1"
	theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "a1", "alice", spec)))
	spec.Work.Image = "alice/private:1"
	theOne[events.JobSubmitted](t, f.decided(t, f.request(t, "a2", "alice", spec)))
	rej := theOne[events.JobRejected](t, f.decided(t, f.request(t, "b1", "bob", spec)))
	if want := `work.image: image "alice/private:1" is not allowed for bob; allowed: e31/base:1`; rej.Reason != want {
		t.Fatalf("reason %q, want %q", rej.Reason, want)
	}
}
