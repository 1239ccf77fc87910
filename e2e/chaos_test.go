package e2e

import (
	"context"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// TestChaosLosesNothing runs every service as separate processes, several
// instances each, against one nats-server, and kills a random one with
// SIGKILL and starts it again, over and over, while jobs flow. Every job
// must end, each attempt be released exactly once, no attempt run twice,
// and the audit pass.
func TestChaosLosesNothing(t *testing.T) {
	t.Parallel()
	sys := startSystem(t, systemOptions{
		instances: map[string]int{"submit": 2, "rent": 2, "output": 2, "release": 2, "ledger": 2, "run": 3},
		nodeCPU:   2,
		// A lost node or scheduler is noticed within a lease time: short,
		// so that the test sees many of them.
		leaseTTL: 2 * time.Second,
	})
	_, js := sys.connect()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const jobs, waves = 240, 8
	ids := jobIDs("chaos", jobs)
	spec := tracedJob(t, sys.ranFile, 0.2)

	start := time.Now()
	// The faults: a random process killed every few hundred milliseconds
	// and started again up to half a second later (pacing, not waiting for
	// anything), until every service has been hit at least twice and every
	// job submitted.
	var killsMu sync.Mutex
	kills := map[string]int{}
	classes := []string{"submit", "rent", "output", "release", "ledger", "run"}
	everyHit := make(chan struct{})
	stopChaos := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 31))
		procs := sys.all()
		hit := false
		for {
			select {
			case <-stopChaos:
				return
			case <-time.After(time.Duration(200+rng.IntN(400)) * time.Millisecond):
			}
			p := procs[rng.IntN(len(procs))]
			p.kill()
			killsMu.Lock()
			kills[p.name[:strings.LastIndexByte(p.name, '-')]]++
			least := 1 << 30
			for _, class := range classes {
				least = min(least, kills[class])
			}
			killsMu.Unlock()
			if least >= 2 && !hit {
				hit = true
				close(everyHit)
			}
			// Down for up to half a second: pacing the fault, not
			// waiting for anything.
			select {
			case <-stopChaos:
			case <-time.After(time.Duration(rng.IntN(500)) * time.Millisecond):
			}
			if err := p.start(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for w := range waves {
		wave := ids[w*jobs/waves : (w+1)*jobs/waves]
		submitAll(ctx, t, js, "chaos", spec, wave)
		// Let each wave reach the run nodes before the next, so that faults
		// meet jobs at every step rather than one queue at the start.
		waitForEvent(t, sys.url, wave[0], events.TypeRunStarted)
	}
	select {
	case <-everyHit:
	case <-ctx.Done():
	}
	close(stopChaos)
	chaos.Wait()
	faults := time.Since(start)

	left := waitOver(ctx, js, ids, t.Logf)
	took := time.Since(start)
	s := checkNothingLost(ctx, t, js, ids, sys.ranFile)
	if len(left) > 0 {
		t.Errorf("%d jobs never ended: %v", len(left), left[:min(len(left), 10)])
	}
	if crashed := sys.crashed(); len(crashed) > 0 {
		t.Errorf("services exited on their own: %v", crashed)
	}
	auditPasses(t, sys.url)
	var hits []string
	total := 0
	for c, n := range kills {
		hits = append(hits, c+"="+strconv.Itoa(n))
		total += n
	}
	sort.Strings(hits)
	t.Logf("chaos: %d kills in %s (%s); all over after %s; %s", total, faults.Round(time.Millisecond), strings.Join(hits, " "), took.Round(time.Millisecond), s)
}

// TestNATSRestartServicesCarryOn kills the NATS server with SIGKILL while
// jobs run and starts it again on the same store, twice: at once, and after
// longer than a lease time, so that the run nodes lose their leases and
// their jobs are held again. Every service must reconnect and carry on,
// with nobody restarting them, and nothing be lost.
func TestNATSRestartServicesCarryOn(t *testing.T) {
	t.Parallel()
	const leaseTTL = 3 * time.Second
	sys := startSystem(t, systemOptions{
		instances: map[string]int{"submit": 1, "rent": 1, "output": 1, "release": 1, "ledger": 1, "run": 2},
		nodeCPU:   2,
		leaseTTL:  leaseTTL,
	})
	_, js := sys.connect()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := tracedJob(t, sys.ranFile, 0.5)
	waves := [][]string{jobIDs("first", 40), jobIDs("second", 40), jobIDs("third", 40)}
	// The server is down for no time, then for longer than a lease.
	downs := []time.Duration{0, 2 * leaseTTL}
	var all []string
	for i, ids := range waves {
		submitAll(ctx, t, js, "nats-restart", spec, ids)
		all = append(all, ids...)
		if i == len(downs) {
			break
		}
		waitForEvent(t, sys.url, ids[0], "e31.job.started.v1")
		sys.nats.kill()
		// Pacing the outage, not waiting for an event.
		time.Sleep(downs[i])
		if err := sys.nats.start(); err != nil {
			t.Fatal(err)
		}
		sys.waitNATS()
	}
	if left := waitOver(ctx, js, all, t.Logf); len(left) > 0 {
		t.Errorf("%d jobs never ended after the NATS restarts: %v", len(left), left[:min(len(left), 10)])
	}
	if crashed := sys.crashed(); len(crashed) > 0 {
		t.Errorf("services exited instead of reconnecting: %v", crashed)
	}
	s := checkNothingLost(ctx, t, js, all, sys.ranFile)
	auditPasses(t, sys.url)
	reconnected := 0
	for _, p := range sys.all() {
		if p.logHas("nats reconnected") >= len(downs) {
			reconnected++
		}
	}
	if reconnected != len(sys.all()) {
		t.Errorf("%d of %d services logged a reconnect after each restart", reconnected, len(sys.all()))
	}
	t.Logf("NATS killed and restarted %d times (down for up to %s, lease %s) with %d services up, none restarted; %s",
		len(downs), downs[len(downs)-1], leaseTTL, len(sys.all()), s)
}
