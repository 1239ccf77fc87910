package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/lease"
)

// renewConns is how many connections the renewing nodes share: a real
// node has one of its own, and ten thousand connections in one process
// would measure the client library more than the server.
const renewConns = 16

// renewersEnv, set in the environment of a process of e31 (or of a test
// binary of this package), makes it the renewers of the scheduler bench
// (MaybeChild) rather than what it was started as: JSON of
// renewersArgs. They run in a process of their own so that what the server
// spends on the leases is measured apart from what the ten thousand
// renewals cost their nodes, which on a real pool run on the nodes.
const renewersEnv = "E31_BENCH_RENEWERS"

// renewersArgs are what the renewers' process is told.
type renewersArgs struct {
	URL   string        `json:"url"`
	Names []string      `json:"names"`
	Boot  string        `json:"boot"`
	TTL   time.Duration `json:"ttl"`
}

// renewersDone is the last line the renewers' process writes: the leases
// its renewers lost, and those that failed otherwise, with the first
// error.
type renewersDone struct {
	Lost   int64  `json:"lost"`
	Failed int64  `json:"failed"`
	Err    string `json:"err,omitempty"`
}

// runRenewers is the renewers' process (MaybeChild): it keeps the leases
// spec (renewersArgs) names until ctx ends, and reports renewersDone.
func runRenewers(ctx context.Context, spec []byte) (any, error) {
	var a renewersArgs
	if err := json.Unmarshal(spec, &a); err != nil {
		return nil, err
	}
	done, err := keepLeases(ctx, a)
	if err != nil {
		done.Err = err.Error()
	}
	return done, nil
}

// keepLeases claims the leases of a.Names, spread over one renewal period
// of the lease time a.TTL (the leases bucket's), and keeps them until ctx
// ends, as run nodes do.
func keepLeases(ctx context.Context, a renewersArgs) (renewersDone, error) {
	var done renewersDone
	kvs := make([]jetstream.KeyValue, renewConns)
	for i := range kvs {
		nc, err := nats.Connect(a.URL, nats.Name(fmt.Sprintf("bench-node-%d", i)))
		if err != nil {
			return done, err
		}
		defer nc.Close()
		js, err := connect.Ready(ctx, nc)
		if err != nil {
			return done, err
		}
		if kvs[i], err = js.KeyValue(ctx, events.NodeLeasesBucket); err != nil {
			return done, fmt.Errorf("the nodes' leases bucket: %w", err)
		}
	}
	var (
		wg           sync.WaitGroup
		lost, failed atomic.Int64
		errMu        sync.Mutex
		firstErr     error
	)
	// Spread over one renewal period, as nodes that started at different
	// times are: all at once, every renewal would come in one burst.
	period := events.NodeLeaseTTL(a.TTL) / 3
	start := time.Now()
	for i, name := range a.Names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(time.Until(start.Add(period * time.Duration(i) / time.Duration(len(a.Names))))):
			case <-ctx.Done():
				return
			}
			l, err := lease.Claim(ctx, kvs[i%renewConns], "node."+name, a.Boot)
			if err == nil {
				err = l.Keep(ctx, nil)
			}
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, lease.ErrLost):
				lost.Add(1)
			default:
				failed.Add(1)
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	done.Lost, done.Failed = lost.Load(), failed.Load()
	return done, firstErr
}

// renewers are nodes keeping their leases as run nodes do, in a process of
// their own (MaybeChild): each claims node.<name> in the nodes' bucket
// under its boot and renews it every third of that bucket's lease time
// (lease.Keep), which the leases bucket copies; RENT reads both.
type renewers struct {
	*child
	once    sync.Once
	done    renewersDone
	stopErr error
}

// startRenewers starts the renewers of names on the server at url, with
// the lease time ttl, in a process of this program started again.
func startRenewers(url string, names []string, boot string, ttl time.Duration) (*renewers, error) {
	c, err := startChild("the renewers' process", renewersEnv, renewersArgs{URL: url, Names: names, Boot: boot, TTL: ttl})
	if err != nil {
		return nil, err
	}
	return &renewers{child: c}, nil
}

// stop ends the renewals: it closes the process's stdin and waits for it
// to report. Stopping again does nothing.
func (r *renewers) stop() {
	r.once.Do(func() { r.stopErr = r.child.stop(&r.done) })
}

// err is why the first lease that failed other than by expiring did, or
// why the renewers' process failed.
func (r *renewers) err() error {
	if r.stopErr != nil {
		return r.stopErr
	}
	if r.done.Err != "" {
		return errors.New(r.done.Err)
	}
	return nil
}

// leaseWrites is how many messages the nodes' bucket and the leases bucket
// have had stored, together: the renewals and their copies.
func leaseWrites(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	var n uint64
	for _, name := range []string{events.KVStream(events.NodeLeasesBucket), events.KVStream(events.LeasesBucket)} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return 0, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		n += info.State.LastSeq
	}
	return n, nil
}

// leaseCost is what keeping the leases costs over window, with nothing
// else running: this process's CPU per second (cores: the server, RENT
// not started yet), the renewers' process's, and lease writes per second.
func leaseCost(ctx context.Context, js jetstream.JetStream, r *renewers, window time.Duration) (cores, renewerCores, writesPerS float64, err error) {
	w0, err := leaseWrites(ctx, js)
	if err != nil {
		return 0, 0, 0, err
	}
	r0, err := r.cpu()
	if err != nil {
		return 0, 0, 0, err
	}
	c0, t0 := cpuTime(), time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return 0, 0, 0, ctx.Err()
	}
	c1, took := cpuTime(), time.Since(t0).Seconds()
	r1, err := r.cpu()
	if err != nil {
		return 0, 0, 0, err
	}
	w1, err := leaseWrites(ctx, js)
	if err != nil {
		return 0, 0, 0, err
	}
	return (c1 - c0).Seconds() / took, (r1 - r0).Seconds() / took, float64(w1-w0) / took, nil
}

// nodesLost is how many NodeExpired events the log holds: nodes RENT
// counted lost, their leases lapsed.
func nodesLost(ctx context.Context, js jetstream.JetStream) (int, error) {
	n := 0
	for _, err := range bus.Stored(ctx, js, "e31.node.*.expired", 1) {
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// leaseWindow is how long the renewals are measured alone, at least: four
// rounds of renewals at the production lease time (four rounds at any).
const leaseWindow = 10 * time.Second

// leaseFigures are what the renewals cost alone, and line, the summary
// line of the scheduler bench, which report ends with the figures added.
type leaseFigures struct {
	cores, renewerCores, writesPerS float64
	line                            string
}

// measureLeases measures the renewals alone for leaseWindow, profiled to
// profile+".leases" if profile is set, and writes what it found.
func measureLeases(ctx context.Context, out io.Writer, js jetstream.JetStream, r *renewers, profile string, nodes int, ttl time.Duration) (leaseFigures, error) {
	var f leaseFigures
	// Every node claims within a renewal period: from the end of the next
	// one, they renew as steadily as they will.
	select {
	case <-time.After(2 * events.NodeLeaseTTL(ttl) / 3):
	case <-ctx.Done():
		return f, ctx.Err()
	}
	p := ""
	if profile != "" {
		p = profile + ".leases"
	}
	stop, err := startCPUProfile(p)
	if err != nil {
		return f, err
	}
	f.cores, f.renewerCores, f.writesPerS, err = leaseCost(ctx, js, r, max(leaseWindow, 4*events.NodeLeaseTTL(ttl)/3))
	stop()
	if err != nil {
		return f, err
	}
	fmt.Fprintf(out, "leases: %d nodes renewing every %s: %.0f lease writes/s (renewals and their copies), the server %.2f cores, nothing else running; the renewals %.2f cores in a process of their own\n",
		nodes, events.NodeLeaseTTL(ttl)/3, f.writesPerS, f.cores, f.renewerCores)
	return f, nil
}

// report writes how many nodes RENT found lost and how many leases their
// renewers lost, and the summary line with the lease figures.
func (f leaseFigures) report(ctx context.Context, out io.Writer, js jetstream.JetStream, r *renewers) {
	if f.line == "" {
		return // the bench failed: it said why
	}
	r.stop()
	lost, err := nodesLost(ctx, js)
	if err != nil {
		fmt.Fprintf(out, "leases: counting the nodes found lost: %v\n", err)
	}
	fmt.Fprintf(out, "leases: %d nodes found lost by RENT; %d leases lost by their renewers, %d failed otherwise (%v)\n",
		lost, r.done.Lost, r.done.Failed, r.err())
	fmt.Fprintf(out, "%s renew=1 lease_writes_per_s=%.0f lease_cores=%.2f renewer_cores=%.2f nodes_lost=%d\n", f.line, f.writesPerS, f.cores, f.renewerCores, lost)
}
