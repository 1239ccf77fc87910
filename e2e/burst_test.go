package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
)

// burstSize is how many submissions TestBurstIsAcceptedAndDrains sends at
// once: 100,000 unless E31_BURST says otherwise (for a quicker local run).
func burstSize(t *testing.T) int {
	n := 100_000
	if v := os.Getenv("E31_BURST"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("E31_BURST=%q: want a positive number of jobs", v)
		}
	}
	return n
}

// TestBurstIsAcceptedAndDrains sends 100,000 job requests as fast as one
// client can, to a system of separate service processes. Every request
// must be stored (the server's acknowledgement) or refused with an error,
// none dropped; SUBMIT must work off the whole backlog and RENT queue every
// job; then every job is cancelled, and every one must end exactly once.
// Meanwhile the memory of every service is read from the kernel: the
// stateless steps must not grow with the backlog, and the three that keep
// a record per job (RENT's queue, the ledger's projection, OUTPUT's
// account of what each job keeps in the store) must stay within a few KiB
// per job.
//
// The jobs wait for a node that never comes (wait_for_node with no run
// node), so that the burst is a queue and not a race with the run nodes,
// and the test takes a minute rather than the quarter hour 100,000 jobs
// take to run.
func TestBurstIsAcceptedAndDrains(t *testing.T) {
	t.Parallel()
	n := burstSize(t)
	sys := startSystem(t, systemOptions{
		instances: map[string]int{"submit": 2, "rent": 1, "output": 1, "release": 1, "ledger": 1},
		leaseTTL:  5 * time.Second,
	})
	nc, js := sys.connect()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The kernel's count of each service's resident memory, twice a second
	// (a sample, not a wait) until the test is over.
	peaks := map[string]int{}
	var peaksMu sync.Mutex
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			peaksMu.Lock()
			for _, p := range sys.all() {
				class := p.name[:strings.LastIndexByte(p.name, '-')]
				peaks[class] = max(peaks[class], rssKiB(p.pid()))
			}
			peaksMu.Unlock()
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	})
	stopSample := sync.OnceFunc(func() { close(stopSampling); sampling.Wait() })
	defer stopSample()

	spec := tracedJob(t, "/dev/null", 0)
	spec.WaitForNode = true
	ids := jobIDs("burst", n)

	start := time.Now()
	submitAll(ctx, t, js, "burst", spec, ids)
	stored := time.Since(start)
	t.Logf("burst: %d requests stored in %s (%.0f/s)", n, stored.Round(time.Millisecond), float64(n)/stored.Seconds())

	// Drained: SUBMIT has answered every request, and RENT has queued
	// every job, which it says when asked why the last one waits.
	if left := waitAll(ctx, t, js, ids, events.TypeJobSubmitted); len(left) > 0 {
		t.Fatalf("%d of %d requests never submitted: %v", len(left), n, left[:min(len(left), 10)])
	}
	accepted := time.Since(start)
	t.Logf("burst: all %d submitted after %s (%.0f/s through SUBMIT)", n, accepted.Round(time.Millisecond), float64(n)/accepted.Seconds())
	why := askWhy(ctx, t, nc, js, ids[n-1])
	if why.State != hold.StateWaiting || why.Queued < n {
		t.Errorf("RENT after the burst: %+v; want the last job waiting with all %d queued", why, n)
	}

	// Every job cancelled, as an operator would a mistaken burst.
	pub := bus.NewPublisher(js, "e31/e2e", nil)
	const batchSize = 1000
	for i := 0; i < n; i += batchSize {
		var batch []bus.Pending
		for _, id := range ids[i:min(i+batchSize, n)] {
			batch = append(batch, bus.Pending{Subject: id, Event: &events.CancelRequested{By: events.Operator, Reason: "burst test"}})
		}
		if _, errs := pub.AppendBatch(ctx, batch); errs != nil {
			for _, err := range errs {
				if err != nil {
					t.Fatalf("cancel the burst: %v", err)
				}
			}
		}
	}
	t.Logf("burst: %d cancels stored after %s", n, time.Since(start).Round(time.Millisecond))
	if left := waitOver(ctx, js, ids, t.Logf); len(left) > 0 {
		t.Fatalf("%d of %d jobs never ended: %v", len(left), n, left[:min(len(left), 10)])
	}
	took := time.Since(start)

	rep := readLog(ctx, t, js)
	bad := 0
	for _, id := range ids {
		j := rep.jobs[id]
		if j == nil || j.requested != 1 || j.submitted != 1 || j.cancelled != 1 || j.rejected != 0 || len(j.attempts) != 0 {
			if bad++; bad <= 10 {
				t.Errorf("job %s: want requested, submitted and cancelled once, never held: %+v", id, j)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d jobs did not end exactly once", bad, n)
	}
	if crashed := sys.crashed(); len(crashed) > 0 {
		t.Errorf("services exited under the burst: %v", crashed)
	}

	stopSample()
	// Bounds, with room for the runtime: a stateless step keeps nothing per
	// job; RENT, the ledger and OUTPUT keep a record per job they know,
	// which must stay within a few KiB (about 3 here, 100,000 jobs in
	// 300 MiB); SUBMIT keeps each submitter's open jobs for its quotas,
	// which must stay within one KiB.
	perJob := 8 // KiB
	bound := map[string]int{"submit": 256<<10 + n, "release": 256 << 10,
		"rent": 256<<10 + perJob*n, "ledger": 256<<10 + perJob*n, "output": 256<<10 + perJob*n}
	var mem []string
	peaksMu.Lock()
	defer peaksMu.Unlock()
	for class, kib := range peaks {
		mem = append(mem, fmt.Sprintf("%s %d MiB", class, kib>>10))
		if kib > bound[class] {
			t.Errorf("%s peaked at %d MiB with %d jobs in the burst; bound %d MiB", class, kib>>10, n, bound[class]>>10)
		}
	}
	sort.Strings(mem)
	t.Logf("burst: %d jobs requested, submitted, queued, cancelled and ended in %s, none lost; peak resident memory: %s",
		n, took.Round(time.Millisecond), strings.Join(mem, ", "))
}

// waitAll follows the log until every job in ids has an event of ceType,
// or ctx ends, and returns the ids without one.
func waitAll(ctx context.Context, t *testing.T, js jetstream.JetStream, ids []string, ceType string) []string {
	return follow(ctx, js, []string{events.KindSubject(ceType)}, ids, "be "+events.Name(ceType), t.Logf,
		func(events.Envelope) bool { return true })
}

// askWhy asks the scheduler, as the operator, why job is where it is, once
// it has read the log as far as it is now.
func askWhy(ctx context.Context, t *testing.T, nc *nats.Conn, js jetstream.JetStream, job string) wire.WhyReply {
	t.Helper()
	s, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(wire.WhyRequest{Job: job, MinSeq: info.State.LastSeq})
	m, err := query.Ask(ctx, nc, wire.RentWhySubject(events.Operator), req)
	if err != nil {
		t.Fatalf("ask RENT why %s waits: %v", job, err)
	}
	var why wire.WhyReply
	if err := json.Unmarshal(m.Data, &why); err != nil {
		t.Fatalf("RENT's answer %q: %v", m.Data, err)
	}
	return why
}
