package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/rent"
)

// benchSpec is a queued job of the scheduler bench.
func benchSpec(i int) events.JobSpec {
	return events.JobSpec{Name: "sched", Work: events.Work{Command: []string{"/bin/true"}}, Priority: i%5 - 2,
		Request: events.Request{CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 64 << 20, LimitSeconds: float64(60 + i%600)}}
}

// SchedulerOptions are the choices of a scheduler bench.
type SchedulerOptions struct {
	// Jobs are queued, over Nodes node announcements; Decisions holds are
	// measured end to end once the pool is full.
	Jobs, Nodes, Decisions int
	// Profile, if set, is where a CPU profile of the measured decisions is
	// written, and allocation profiles to Profile+".alloc0" (when they
	// start) and Profile+".alloc" (when they end): `go tool pprof -base
	// FILE.alloc0 FILE.alloc` shows what the decisions allocated.
	Profile string
	// Stall is how long the bench waits without a single new hold before it
	// fails instead of waiting on; default 60 s.
	Stall time.Duration
	// Renew makes the nodes keep their leases as run nodes do, at the
	// production lease time (events.DefaultLeaseTTL), from before RENT
	// starts to the end: the bench then also measures what the renewals
	// cost on their own, and counts the nodes RENT found lost.
	Renew bool
	// Sync is the event store's durability: interval (default) or always.
	Sync string
	// LeaseTTL is the leases bucket's lease time with Renew; default
	// events.DefaultLeaseTTL.
	LeaseTTL time.Duration
}

// benchLeaseTTL is the lease time of the bench's own leases bucket. The
// bench's nodes are names in a log, with nobody behind them to renew a
// lease: with the production ten seconds, a loaded machine that takes
// longer than that to rebuild lets every node lapse, RENT counts them lost,
// and no hold ever comes. An hour outlives any run.
const benchLeaseTTL = time.Hour

// Scheduler queues o.Jobs jobs over o.Nodes node announcements, as real
// events on an embedded server, then starts RENT alone: it rebuilds from
// the log and holds what fits; a releaser gives every hold back at once, so
// RENT keeps deciding with the queue still deep. It writes the rebuild
// time, decisions per second end to end (measured over o.Decisions holds),
// the cost of one decision at a short and at the full queue (in memory),
// and the heap per queued job.
func Scheduler(ctx context.Context, out io.Writer, o SchedulerOptions) error {
	jobs, nodes, decisions := o.Jobs, o.Nodes, o.Decisions
	if jobs <= 0 || nodes <= 0 || decisions <= 0 {
		return fmt.Errorf("%w: bench scheduler: --jobs, --nodes and --decisions must be positive", ErrUsage)
	}
	if nodes*4+decisions > jobs {
		return fmt.Errorf("%w: bench scheduler: %d jobs cannot fill %d slots and give %d more holds", ErrUsage, jobs, nodes*4, decisions)
	}
	stall := o.Stall
	if stall <= 0 {
		stall = time.Minute
	}
	// As e31-rent runs (rent.GCPercent), unless GOGC says otherwise.
	defer rent.TuneGC()()
	// Memory and pure decision cost, in memory first.
	perJob, short, deep := poolCosts(jobs, nodes)
	fmt.Fprintf(out, "scheduler (in memory): %.0f bytes of heap per queued job; one decision costs %.1f µs with %d queued and %.1f µs with %d queued\n",
		perJob, short, min(jobs, 1000), deep, jobs)

	sync := broker.Sync(o.Sync)
	if sync == "" {
		sync = broker.SyncInterval
	}
	leaseTTL := benchLeaseTTL
	if o.Renew {
		leaseTTL = events.DefaultLeaseTTL
		if o.LeaseTTL > 0 {
			leaseTTL = o.LeaseTTL
		}
	}
	ls, err := startLogServerSync(ctx, "sched", false, sync, events.StreamOptions{LeaseTTL: leaseTTL})
	if err != nil {
		return err
	}
	defer ls.Close()
	nc, js := ls.nc, ls.js
	kv, err := js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		return err
	}
	pub := bus.NewPublisher(js, "e31/bench", nil)
	var batch []bus.Pending
	flush := func() error {
		_, errs := pub.AppendBatch(ctx, batch)
		batch = batch[:0]
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	names := make([]string, nodes)
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("n%04d", i)
		names[i] = name
		// The nodes hold leases, as live ones do, or RENT would count them
		// lost: written once, or kept by renewers.
		if !o.Renew {
			if _, err := kv.Put(ctx, "node."+name, []byte("b1")); err != nil {
				return err
			}
		}
		batch = append(batch, bus.Pending{Subject: name, Event: &events.NodeAnnounced{Node: name, Boot: "b1", CPU: 4, MemoryBytes: 16 << 30, DiskBytes: 1 << 40}})
		// A batch at a time: more at once than nats.go lets wait for an
		// answer stalls the publisher (10,000 nodes did, --sync always).
		if len(batch) == 1024 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	start := time.Now()
	for i := 0; i < jobs; i++ {
		batch = append(batch, bus.Pending{Subject: fmt.Sprintf("job-%06d", i), Event: &events.JobSubmitted{Submitter: fmt.Sprintf("team-%02d", i%50), Spec: benchSpec(i)}})
		if len(batch) == 1024 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "scheduler: %d jobs and %d nodes logged in %s\n", jobs, nodes, time.Since(start).Round(time.Millisecond))
	var renew leaseFigures
	if o.Renew {
		r, err := startRenewers(ls.srv.ClientURL(), names, "b1", leaseTTL)
		if err != nil {
			return fmt.Errorf("%w: bench scheduler: %d nodes' leases: %v", ErrFailed, nodes, err)
		}
		defer r.stop()
		if renew, err = measureLeases(ctx, out, js, r, o.Profile, nodes, leaseTTL); err != nil {
			return err
		}
		defer func() { renew.report(ctx, out, js, r) }()
	}

	// The releaser gives back every hold as soon as it is logged.
	var held atomic.Int64
	firstHolds := make(chan time.Duration, 1)
	done := make(chan time.Duration, 1)
	relErr := make(chan error, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The releaser stands in for RELEASE, a service of its own: it has
	// its own connection, so that what it reads does not queue behind what
	// RENT reads on RENT's.
	rnc, err := ls.srv.Connect("bench")
	if err != nil {
		return err
	}
	defer rnc.Close()
	rjs, err := connect.Ready(ctx, rnc)
	if err != nil {
		return err
	}
	go func() {
		relErr <- releaseHolds(rctx, rjs, bus.NewPublisher(rjs, "e31/bench", nil), &held, int64(nodes*4), int64(nodes*4+decisions), firstHolds, done)
	}()

	obs := &passCounter{}
	svc, err := rent.New(nc, js, rent.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Instance: "bench", Observer: obs})
	if err != nil {
		return err
	}
	started := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- svc.Run(rctx) }()
	// wait returns what arrives on c, or fails at once when RENT or the
	// releaser stops, or when no hold came for stall: a bench that cannot
	// finish says why instead of hanging.
	wait := func(c <-chan time.Duration, what string) (time.Duration, error) {
		tick := time.NewTicker(stall / 4)
		defer tick.Stop()
		last, lastAt := held.Load(), time.Now()
		for {
			select {
			case d := <-c:
				return d, nil
			case err := <-runErr:
				return 0, fmt.Errorf("%w: bench scheduler: RENT stopped while %s after %d holds: %v", ErrFailed, what, held.Load(), err)
			case err := <-relErr:
				return 0, fmt.Errorf("%w: bench scheduler: the releaser stopped while %s after %d holds: %v", ErrFailed, what, held.Load(), err)
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-tick.C:
				if n := held.Load(); n != last {
					last, lastAt = n, time.Now()
				} else if time.Since(lastAt) >= stall {
					return 0, fmt.Errorf("%w: bench scheduler: no hold for %s while %s (%d holds so far): is the machine too loaded, or RENT stuck?", ErrFailed, stall, what, n)
				}
			}
		}
	}
	fill, err := wait(firstHolds, "filling the pool")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "scheduler: rebuilt and filled %d slots in %s (%.0f holds/s from a cold start)\n",
		nodes*4, fill.Round(time.Millisecond), float64(nodes*4)/fill.Seconds())
	// CPU time, server and releaser included (all in this process): what
	// a decision costs whatever else the machine runs, where the rate
	// depends on how much of the cores the bench gets.
	cpu0 := cpuTime()
	passes0 := obs.passes.Load()
	if o.Profile != "" {
		if err := writeAllocs(o.Profile + ".alloc0"); err != nil {
			return err
		}
	}
	stopProfile, err := startCPUProfile(o.Profile)
	if err != nil {
		return err
	}
	defer stopProfile()
	steady, err := wait(done, "deciding with a deep queue")
	cpuPer := float64((cpuTime() - cpu0).Microseconds()) / float64(decisions)
	passes := obs.passes.Load() - passes0
	stopProfile()
	if o.Profile != "" {
		if err := writeAllocs(o.Profile + ".alloc"); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	rate := float64(decisions) / (steady - fill).Seconds()
	fmt.Fprintf(out, "scheduler: %d more holds, each after a release, with %d+ still queued: %.0f decisions/s end to end, %.0f µs of cpu each (server and releaser included; %.0f/s if the bench had %d cores to itself); %d passes of the pool, %.1f holds each\n",
		decisions, jobs-nodes*4-decisions, rate, cpuPer, float64(runtime.NumCPU())*1e6/cpuPer, runtime.NumCPU(), passes, float64(decisions)/float64(max(passes, 1)))
	renew.line = fmt.Sprintf("bench scheduler jobs=%d nodes=%d decisions_per_s=%.0f fill_s=%.2f bytes_per_queued_job=%.0f decide_us_short=%.1f decide_us_deep=%.1f total_s=%.1f cpu_us_per_decision=%.0f",
		jobs, nodes, rate, fill.Seconds(), perJob, short, deep, time.Since(started).Seconds(), cpuPer)
	if !o.Renew {
		fmt.Fprintln(out, renew.line)
	}
	return nil
}

// passCounter counts the pool's passes (calls of its decision), to say how
// many holds one pass makes: a pass has a cost of its own, whatever it holds.
type passCounter struct{ passes atomic.Int64 }

func (c *passCounter) Decided(time.Duration)  { c.passes.Add(1) }
func (c *passCounter) Waiting(map[string]int) {}
func (c *passCounter) Leading(bool)           {}

// releaseHolds follows the holds and counts them. The first fill holds stay held;
// every hold after that is released at once, in batches, so that RENT keeps
// deciding with a deep queue. first reports when fill holds were made, done
// when total were.
func releaseHolds(ctx context.Context, js jetstream.JetStream, pub *bus.Publisher, held *atomic.Int64, fill, total int64, first, done chan<- time.Duration) error {
	start := time.Now()
	cons, err := js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.KindSubject(events.TypeComputeHeld)}})
	if err != nil {
		return fmt.Errorf("follow the holds: %w", err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return fmt.Errorf("follow the holds: %w", err)
	}
	context.AfterFunc(ctx, iter.Stop)
	var batch []bus.Pending
	var firstFill []bus.Pending
	for {
		m, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("follow the holds: %w", err)
		}
		// A release names the job and the hold, nothing of the spec a hold
		// carries: the stand-in reads no more than that, so that its own
		// reading weighs as little as it can on what the bench measures.
		subj, err := events.ParseSubject(m.Subject())
		if err != nil || subj.Space != events.SpaceJob {
			continue
		}
		var h events.Hold
		if err := json.Unmarshal(m.Data(), &h); err != nil {
			continue
		}
		rel := bus.Pending{Subject: subj.Job, Event: &events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true}}
		n := held.Add(1)
		switch {
		case n == total:
			done <- time.Since(start)
			return nil
		case n < fill:
			firstFill = append(firstFill, rel)
			continue
		case n == fill:
			first <- time.Since(start)
			// From here on, capacity comes back as fast as it is taken.
			batch = append(batch, firstFill...)
			firstFill = nil
		}
		batch = append(batch, rel)
		if md, err := m.Metadata(); len(batch) >= 256 || err == nil && md.NumPending == 0 {
			for len(batch) > 0 {
				n := min(len(batch), 256)
				if _, errs := pub.AppendBatch(ctx, batch[:n]); errors.Join(errs...) != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("release: %w", errors.Join(errs...))
				}
				batch = batch[n:]
			}
		}
	}
}

// poolCosts measures the pool in memory: the heap one queued job takes,
// and the cost of one decision with a short and with a full queue.
func poolCosts(jobs, nodes int) (perJob, shortUS, deepUS float64) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	p := rent.NewPool(rent.PoolConfig{}, nil)
	for i := 0; i < jobs; i++ {
		env := events.New(fmt.Sprintf("job-%06d", i), &events.JobSubmitted{Submitter: fmt.Sprintf("team-%02d", i%50), Spec: benchSpec(i)}, "bench", time.Now())
		env.Seq = uint64(i + 1)
		p.Apply(env)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	perJob = float64(after.HeapAlloc-before.HeapAlloc) / float64(jobs)
	runtime.KeepAlive(p)
	return perJob, decideCost(min(jobs, 1000), nodes), decideCost(jobs, nodes)
}

// decideCost is the time of one Decide that makes one hold after one
// release, with queued jobs waiting behind a full pool.
func decideCost(queued, nodes int) float64 {
	p := rent.NewPool(rent.PoolConfig{}, nil)
	seq := uint64(0)
	apply := func(subject string, ev events.Event) events.Envelope {
		seq++
		env := events.New(subject, ev, "bench", time.Now())
		env.Seq = seq
		p.Apply(env)
		return env
	}
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("n%04d", i)
		apply(name, &events.NodeAnnounced{Node: name, Boot: "b1", CPU: 4, MemoryBytes: 16 << 30, DiskBytes: 1 << 40})
	}
	total := queued + nodes*4
	for i := 0; i < total; i++ {
		apply(fmt.Sprintf("job-%06d", i), &events.JobSubmitted{Submitter: fmt.Sprintf("team-%02d", i%50), Spec: benchSpec(i)})
	}
	var holds []events.ComputeHeld
	var ids []string
	for {
		ds := p.Decide(256)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			apply(d.Job, d.Event)
			if h, ok := d.Event.(*events.ComputeHeld); ok {
				holds, ids = append(holds, *h), append(ids, d.Job)
			}
		}
	}
	const rounds = 3000
	var spent time.Duration
	for r := 0; r < rounds && len(holds) > 0; r++ {
		h, id := holds[0], ids[0]
		holds, ids = holds[1:], ids[1:]
		apply(id, &events.ComputeReleased{Hold: h.Hold, Outcome: events.Succeeded, Final: true})
		t0 := time.Now()
		ds := p.Decide(256)
		spent += time.Since(t0)
		for _, d := range ds {
			apply(d.Job, d.Event)
			if nh, ok := d.Event.(*events.ComputeHeld); ok {
				holds, ids = append(holds, *nh), append(ids, d.Job)
			}
		}
	}
	return float64(spent.Microseconds()) / rounds
}
