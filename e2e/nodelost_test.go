package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/jobfile"
)

// TestALostNodeIsNeverTheJobsFault kills (SIGKILL) the only node large
// enough for a running job, with a smaller node beside it. The job must not
// be rejected when the node's lease lapses (it was accepted and held once:
// "no node can ever hold it" is not for RENT to say again), nor must a job
// submitted while that node is away; once the node is started again, the
// first job's attempt 2 and the second job succeed on it, and the audit
// passes.
func TestALostNodeIsNeverTheJobsFault(t *testing.T) {
	t.Parallel()
	const leaseTTL = 2 * time.Second
	sys := startSystem(t, systemOptions{
		instances: map[string]int{"submit": 1, "rent": 1, "output": 1, "release": 1, "ledger": 1},
		leaseTTL:  leaseTTL,
	})
	// run-1 can hold a 1-cpu job, run-2 cannot.
	big := sys.add("run", 1, 2)
	sys.add("run", 2, 0.5)
	nc, js := sys.connect()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The first job's attempt 1 runs until it is killed with its node
	// (exec, so that the sleep is the node's child and dies with it); any
	// other attempt, and the late job, finish at once.
	first, late := "nodelost-first", "nodelost-late"
	job, err := jobfile.Parse("lost.yaml", []byte(`
name: lost
work:
  command: ["/bin/sh", "-c", "if [ \"$E31_JOB_ID $E31_ATTEMPT\" = \"`+first+` 1\" ]; then exec sleep 120; fi; echo ok > $E31_OUTPUT/ok.txt"]
  env: {PATH: /usr/bin:/bin}
request: {cpu: 1, memory: 32MiB, disk: 1MiB, limit: 5m}
output: [ok.txt]
`), "")
	if err != nil {
		t.Fatal(err)
	}
	// Both nodes in the log before the job: RENT judges a job against the
	// nodes announced before it, and with run-1 not yet there, no node
	// could ever hold it.
	for _, node := range []string{"run-1", "run-2"} {
		nextEvent(ctx, t, js, "e31.node."+node+".>", func(env events.Envelope) bool {
			_, ok := env.Event.(*events.NodeAnnounced)
			return ok
		})
	}
	submitAll(ctx, t, js, "nodelost", job.Spec, []string{first})
	held := nextEvent(ctx, t, js, events.JobSubject(first), func(env events.Envelope) bool {
		_, ok := env.Event.(*events.RunStarted)
		return ok
	}).Event.(*events.RunStarted)
	if held.Node != "run-1" {
		t.Fatalf("attempt %d started on %s, want run-1, the only node that can hold it", held.Attempt, held.Node)
	}

	big.kill()
	expired := nextEvent(ctx, t, js, "e31.node.run-1.>", func(env events.Envelope) bool {
		_, ok := env.Event.(*events.NodeExpired)
		return ok
	})
	t.Logf("run-1 killed; NodeExpired at #%d", expired.Seq)
	released := nextEvent(ctx, t, js, events.JobSubject(first), func(env events.Envelope) bool {
		r, ok := env.Event.(*events.ComputeReleased)
		return ok && r.Attempt == 1
	}).Event.(*events.ComputeReleased)
	if released.Final || released.Outcome != events.NodeLost {
		t.Fatalf("attempt 1 released as %s (final %v), want node_lost and held again", released.Outcome, released.Final)
	}
	// Once RENT has read the release, the job waits, for run-1, and is
	// not rejected.
	if why := askWhy(ctx, t, nc, js, first); why.State != hold.StateWaiting || !strings.Contains(why.Reason, "never the job's fault") ||
		!strings.Contains(why.Reason, "run-1") {
		t.Errorf("after its node was lost, RENT says %s: %q; want waiting for run-1, not rejected", why.State, why.Reason)
	}

	// A job submitted while run-1 is lost is judged against it too.
	submitAll(ctx, t, js, "nodelost", job.Spec, []string{late})
	nextEvent(ctx, t, js, events.JobSubject(late), func(env events.Envelope) bool {
		_, ok := env.Event.(*events.JobSubmitted)
		return ok
	})
	if why := askWhy(ctx, t, nc, js, late); why.State != hold.StateWaiting || !strings.Contains(why.Reason, "waits for run-1") {
		t.Errorf("submitted while run-1 was lost, RENT says %s: %q; want waiting for run-1", why.State, why.Reason)
	}

	if err := big.start(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first, late} {
		end := nextEvent(ctx, t, js, events.JobSubject(id), func(env events.Envelope) bool { return events.Terminal(env.Event) })
		r, ok := end.Event.(*events.ComputeReleased)
		if !ok || r.Outcome != events.Succeeded {
			t.Errorf("%s ended with %s %+v, want succeeded", id, events.Name(end.Type), end.Event)
			continue
		}
		want := map[string]int{first: 2, late: 1}[id]
		if r.Attempt != want || r.Node != "run-1" {
			t.Errorf("%s succeeded in attempt %d on %s, want attempt %d on run-1", id, r.Attempt, r.Node, want)
		}
	}
	if crashed := sys.crashed(); len(crashed) > 0 {
		t.Errorf("services exited on their own: %v", crashed)
	}
	auditPasses(t, sys.url)
}

// nextEvent reads the log on subject from its start until an event that
// match accepts, and returns it; it fails the test if ctx ends first. It
// follows with bus.Follow, not nats.go's ordered consumer: it is asked
// right after a NATS restart too, and the follower makes its consumer again
// if the first one is lost or silent rather than waiting on it.
func nextEvent(ctx context.Context, t *testing.T, js jetstream.JetStream, subject string, match func(events.Envelope) bool) events.Envelope {
	t.Helper()
	f, err := bus.Follow(ctx, js, []string{subject}, 1)
	if err != nil {
		t.Fatalf("waiting for an event on %s: %v", subject, err)
	}
	defer f.Stop()
	for {
		m, _, err := f.Next()
		if err != nil {
			t.Fatalf("waiting for an event on %s: %v", subject, err)
		}
		env, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			continue
		}
		env.Seq = m.Sequence
		if match(env) {
			return env
		}
	}
}
