package run_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/gpu/gputest"
)

// gpuNode is a RUN agent for n1 over a fake driver tree (root) with the
// process executor, on its own server.
type gpuNode struct {
	ctx  context.Context
	js   jetstream.JetStream
	pub  *bus.Publisher
	root string
	devs []events.Device
	cfg  run.Config
}

func startGPUNode(t *testing.T, n int) *gpuNode {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	obs, err := js.ObjectStore(ctx, events.DataBucket)
	if err != nil {
		t.Fatal(err)
	}
	g := &gpuNode{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/test", nil), root: t.TempDir(), devs: gputest.Devices(n)}
	gputest.Tree(t, g.root, g.devs, 0)
	g.cfg = run.Config{Node: "n1", CPU: 2, MemoryBytes: 1 << 30, DiskBytes: 1 << 30, Store: stage.NewObjectStore(obs),
		Grace: time.Second, Logger: quiet, GPURoot: g.root, GPUCheck: 20 * time.Millisecond, WorkDir: t.TempDir()}
	return g
}

// service is a new RUN agent (a new boot, when run) over the node's tree.
func (g *gpuNode) service(t *testing.T) *run.Service {
	t.Helper()
	cfg := g.cfg
	exec, err := executor.NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Executor = exec
	s, err := run.New(g.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// running runs s until the test ends or stop is called.
func (g *gpuNode) running(t *testing.T, s *run.Service) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(g.ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			// A Run stopped while it is still starting (setting up the
			// stream, claiming the lease) says it was cancelled.
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("Run did not return")
		}
	}
	t.Cleanup(stop)
	return stop
}

// nodeEvent waits for the first event of n1 after seq that matches, and
// returns it with its sequence.
func (g *gpuNode) nodeEvent(t *testing.T, after uint64, what string, match func(events.Event) bool) (events.Event, uint64) {
	t.Helper()
	c, err := g.js.OrderedConsumer(g.ctx, events.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"e31.node.n1.>"}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		env, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			continue
		}
		meta, _ := m.Metadata()
		if match(env.Event) {
			return env.Event, meta.Sequence.Stream
		}
	}
}

func announcedWith(n int) func(events.Event) bool {
	return func(ev events.Event) bool {
		a, ok := ev.(*events.NodeAnnounced)
		return ok && len(a.Devices) == n
	}
}

func TestANodeAnnouncesItsGPUsAndWithdrawsOneMissingAfterARestart(t *testing.T) {
	t.Parallel()
	g := startGPUNode(t, 2)
	stop := g.running(t, g.service(t))
	ev, seq := g.nodeEvent(t, 0, "the announcement", announcedWith(2))
	first := ev.(*events.NodeAnnounced)
	if first.GPU != 2 || !slices.Equal([]string{first.Devices[0].UUID, first.Devices[1].UUID}, []string{g.devs[0].UUID, g.devs[1].UUID}) {
		t.Fatalf("announced %+v, want both devices", first)
	}
	stop()

	// The second GPU falls off the bus while the node is down.
	gputest.Remove(t, g.root, g.devs[1])
	g.running(t, g.service(t))
	ev, seq = g.nodeEvent(t, seq, "the announcement after the restart", announcedWith(1))
	again := ev.(*events.NodeAnnounced)
	if again.Boot == first.Boot || again.GPU != 1 || again.Devices[0].UUID != g.devs[0].UUID {
		t.Fatalf("announced again %+v, want a new boot with the first device alone", again)
	}
	ev, _ = g.nodeEvent(t, seq, "the withdrawal", func(ev events.Event) bool { _, ok := ev.(*events.DeviceWithdrawn); return ok })
	w := ev.(*events.DeviceWithdrawn)
	if w.Device != g.devs[1].UUID || w.Boot != again.Boot || !strings.Contains(w.Reason, "no longer lists") {
		t.Errorf("withdrawn %+v, want the missing device, in the new boot, with why", w)
	}
}

func TestRunRefusesAHoldNamingADeviceItDoesNotHave(t *testing.T) {
	t.Parallel()
	g := startGPUNode(t, 1)
	s := g.service(t)
	spec := job("true", nil)
	spec.Request.GPU = 1
	if _, err := g.pub.Append(g.ctx, "job-1", &events.JobSubmitted{Submitter: "alice", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	held, err := g.pub.Append(g.ctx, "job-1", &events.ComputeHeld{Submitter: "alice", Spec: spec,
		Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 1 << 20, GPU: 1, GPUs: []string{"GPU-not-here"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.HandleHeld(g.ctx, held); err != nil {
		t.Fatal(err)
	}
	evs, err := bus.ReadJob(g.ctx, g.js, "job-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	var stopped *events.RunStopped
	for _, e := range evs {
		if _, ok := e.Event.(*events.RunStarted); ok {
			t.Error("the job was started on a device the node does not have")
		}
		if st, ok := e.Event.(*events.RunStopped); ok {
			stopped = st
		}
	}
	if stopped == nil || stopped.Outcome != events.NodeLost || !strings.Contains(stopped.Reason, "GPU-not-here, which this node does not offer") {
		t.Fatalf("stopped %+v, want node_lost saying the node has no such device", stopped)
	}
}

func TestADeviceTheDriverStopsListingDuringAJobIsWithdrawnThenRestored(t *testing.T) {
	t.Parallel()
	g := startGPUNode(t, 2)
	g.running(t, g.service(t))
	_, seq := g.nodeEvent(t, 0, "the announcement", announcedWith(2))
	// The job (a plain process here) takes its device off the bus, and
	// says what it was told.
	gone := filepath.Join(g.root, "proc/driver/nvidia/gpus", g.devs[1].Bus)
	spec := job(`rm -rf "$GONE"; echo "$CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER $E31_GPU_UUIDS" > "$E31_OUTPUT/told.txt"`,
		map[string]string{"GONE": gone}, events.OutputDecl{Path: "told.txt", Required: true})
	spec.Request.GPU = 1
	if _, err := g.pub.Append(g.ctx, "job-1", &events.JobSubmitted{Submitter: "alice", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.pub.Append(g.ctx, "job-1", &events.ComputeHeld{Submitter: "alice", Spec: spec,
		Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 1 << 20, GPU: 1, GPUs: []string{g.devs[1].UUID}}}); err != nil {
		t.Fatal(err)
	}
	ev, seq := g.nodeEvent(t, seq, "the withdrawal", func(ev events.Event) bool { _, ok := ev.(*events.DeviceWithdrawn); return ok })
	w := ev.(*events.DeviceWithdrawn)
	if w.Device != g.devs[1].UUID || w.Change != 1 || !strings.Contains(w.Reason, "after job job-1 ended: the driver no longer lists it") {
		t.Errorf("withdrawn %+v, want the job's device, after the job, with why", w)
	}
	// Still gone: not restored. Back on the bus: restored.
	gputest.Add(t, g.root, g.devs[1])
	ev, _ = g.nodeEvent(t, seq, "the restoration", func(ev events.Event) bool { _, ok := ev.(*events.DeviceRestored); return ok })
	if r := ev.(*events.DeviceRestored); r.Device != g.devs[1].UUID || r.Change != 2 || r.Boot != w.Boot {
		t.Errorf("restored %+v, want the device, change 2 of the same boot", r)
	}
	evs, err := bus.ReadJob(g.ctx, g.js, "job-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		st, ok := e.Event.(*events.RunStopped)
		if !ok {
			continue
		}
		if st.Outcome != events.Succeeded {
			t.Fatalf("the job: %s (%s)", st.Outcome, st.Reason)
		}
		dest := t.TempDir()
		if err := stage.Fetch(g.ctx, g.cfg.Store, st.Output.Files, dest, nil); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dest, "told.txt"))
		if want := "0 PCI_BUS_ID " + g.devs[1].UUID + "\n"; string(b) != want {
			t.Errorf("the job was told %q, want %q", b, want)
		}
	}
}
