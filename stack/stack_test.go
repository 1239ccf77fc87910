package stack

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/services/run"
)

// TestAJobGoesThroughTheWholeStack starts a whole e31 with two nodes that
// run jobs as processes, submits a job as the operator and waits for its
// release; then a node crashes, and the readiness check names it.
func TestAJobGoesThroughTheWholeStack(t *testing.T) {
	t.Parallel()
	ctx := natstest.Context(t, 2*time.Minute)
	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Sync: "interval", Nodes: 2,
		Node: run.Config{CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 256 << 20, ExecutorKind: run.ExecProcess, Grace: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = s.Stop()
		}
	})
	if err := s.Running(ctx); err != nil {
		t.Fatalf("just started: %v", err)
	}
	nc, err := s.Connect(Operator, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := connect.Ready(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	pub := bus.NewPublisher(js, "e31/test", nil)
	spec := events.JobSpec{Name: "true", Work: events.Work{Command: []string{"/bin/true"}},
		Request: events.Request{CPU: 0.1, MemoryBytes: 64 << 20, DiskBytes: 16 << 20, LimitSeconds: 30}}
	const job = "stack-test-1"
	if _, err := pub.Append(ctx, job, &events.JobRequested{Submitter: "bench", Spec: spec}, bus.ExpectLast(0)); err != nil {
		t.Fatal(err)
	}
	w, err := js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.JobSubject(job)}})
	if err != nil {
		t.Fatal(err)
	}
	deadline, _ := ctx.Deadline()
	for {
		m, err := w.Next(jetstream.FetchMaxWait(time.Until(deadline)))
		if err != nil {
			t.Fatalf("waiting for the release of %s: %v", job, err)
		}
		env, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			continue
		}
		if rel, ok := env.Event.(*events.ComputeReleased); ok {
			if rel.Outcome != events.Succeeded {
				t.Fatalf("job %s: %s, want succeeded", job, rel.Outcome)
			}
			break
		}
		if _, ok := env.Event.(*events.JobRejected); ok {
			t.Fatalf("job %s rejected", job)
		}
	}
	s.Crash("node-2")
	if err := s.Running(ctx); err == nil || !strings.Contains(err.Error(), "node-2") {
		t.Errorf("after node-2 crashed, Running says %v", err)
	}
	stopped = true
	if err := s.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// TestStartRefusesWhatCannotWork checks that a Config that cannot work is
// refused before anything starts, and that an unknown service is named.
func TestStartRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, cfg := range map[string]Config{
		"no dir":    {},
		"bad user":  {Dir: t.TempDir(), Users: []string{"not a name"}, Node: run.Config{ExecutorKind: run.ExecProcess}},
		"no cpu":    {Dir: t.TempDir(), Node: run.Config{CPU: -1, ExecutorKind: run.ExecProcess}},
		"bad nodes": {Dir: t.TempDir(), Nodes: -1, Node: run.Config{ExecutorKind: run.ExecProcess}},
	} {
		if _, err := Start(ctx, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	if _, err := NewService("web", nil, nil, Configs{}, nil); !errors.Is(err, ErrUnknownService) {
		t.Errorf("NewService(web): %v, want ErrUnknownService", err)
	}
}
