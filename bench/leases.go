package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/lease"
)

// renewConns is how many connections the renewing nodes share: a real
// node has one of its own, and ten thousand connections in one process
// would measure the client library more than the server.
const renewConns = 16

// renewers are nodes keeping their leases as run nodes do: each claims
// node.<name> in the nodes' bucket under its boot and renews it every
// third of that bucket's lease time (lease.Keep), which the leases bucket
// copies; RENT reads both.
type renewers struct {
	conns  []*nats.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// lost counts leases Keep gave up (ErrLost: a renewal came after the
	// key expired), failed the other errors.
	lost, failed atomic.Int64
	errMu        sync.Mutex
	firstErr     error
}

// startRenewers claims the leases of names, spread over one renewal
// period of the lease time ttl (the leases bucket's), and keeps them until
// stop.
func startRenewers(ctx context.Context, srv *broker.Server, names []string, boot string, ttl time.Duration) (*renewers, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &renewers{cancel: cancel}
	kvs := make([]jetstream.KeyValue, renewConns)
	for i := range kvs {
		nc, err := srv.Connect(fmt.Sprintf("bench-node-%d", i))
		if err != nil {
			r.stop()
			return nil, err
		}
		r.conns = append(r.conns, nc)
		js, err := connect.Ready(ctx, nc)
		if err != nil {
			r.stop()
			return nil, err
		}
		if kvs[i], err = js.KeyValue(ctx, events.NodeLeasesBucket); err != nil {
			r.stop()
			return nil, fmt.Errorf("the nodes' leases bucket: %w", err)
		}
	}
	// Spread over one renewal period, as nodes that started at different
	// times are: all at once, every renewal would come in one burst.
	period := events.NodeLeaseTTL(ttl) / 3
	start := time.Now()
	for i, name := range names {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			select {
			case <-time.After(time.Until(start.Add(period * time.Duration(i) / time.Duration(len(names))))):
			case <-ctx.Done():
				return
			}
			l, err := lease.Claim(ctx, kvs[i%renewConns], "node."+name, boot)
			if err == nil {
				err = l.Keep(ctx, nil)
			}
			switch {
			case err == nil || ctx.Err() != nil:
			case errors.Is(err, lease.ErrLost):
				r.lost.Add(1)
			default:
				r.failed.Add(1)
				r.errMu.Lock()
				if r.firstErr == nil {
					r.firstErr = err
				}
				r.errMu.Unlock()
			}
		}()
	}
	return r, nil
}

// stop ends the renewals and closes the connections.
func (r *renewers) stop() {
	r.cancel()
	r.wg.Wait()
	for _, nc := range r.conns {
		nc.Close()
	}
}

// err is why the first lease that failed other than by expiring did.
func (r *renewers) err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.firstErr
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

// leaseCost is what keeping the leases costs the process (the server, and
// the nodes' renewals in it) over window, with nothing else running: CPU
// per second (cores) and lease writes per second.
func leaseCost(ctx context.Context, js jetstream.JetStream, window time.Duration) (cores, writesPerS float64, err error) {
	w0, err := leaseWrites(ctx, js)
	if err != nil {
		return 0, 0, err
	}
	c0, t0 := cpuTime(), time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	w1, err := leaseWrites(ctx, js)
	if err != nil {
		return 0, 0, err
	}
	took := time.Since(t0).Seconds()
	return (cpuTime() - c0).Seconds() / took, float64(w1-w0) / took, nil
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
	cores, writesPerS float64
	line              string
}

// measureLeases measures the renewals alone for leaseWindow, profiled to
// profile+".leases" if profile is set, and writes what it found.
func measureLeases(ctx context.Context, out io.Writer, js jetstream.JetStream, profile string, nodes int, ttl time.Duration) (leaseFigures, error) {
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
	f.cores, f.writesPerS, err = leaseCost(ctx, js, max(leaseWindow, 4*events.NodeLeaseTTL(ttl)/3))
	stop()
	if err != nil {
		return f, err
	}
	fmt.Fprintf(out, "leases: %d nodes renewing every %s: %.0f lease writes/s (renewals and their copies), %.2f cores (the server and the renewals, nothing else running)\n",
		nodes, events.NodeLeaseTTL(ttl)/3, f.writesPerS, f.cores)
	return f, nil
}

// report writes how many nodes RENT found lost and how many leases their
// renewers lost, and the summary line with the lease figures.
func (f leaseFigures) report(ctx context.Context, out io.Writer, js jetstream.JetStream, r *renewers) {
	if f.line == "" {
		return // the bench failed: it said why
	}
	lost, err := nodesLost(ctx, js)
	if err != nil {
		fmt.Fprintf(out, "leases: counting the nodes found lost: %v\n", err)
	}
	fmt.Fprintf(out, "leases: %d nodes found lost by RENT; %d leases lost by their renewers, %d failed otherwise (%v)\n",
		lost, r.lost.Load(), r.failed.Load(), r.err())
	fmt.Fprintf(out, "%s renew=1 lease_writes_per_s=%.0f lease_cores=%.2f nodes_lost=%d\n", f.line, f.writesPerS, f.cores, lost)
}
