package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/stack"
)

// HistoryOptions is what History measures.
type HistoryOptions struct {
	// Jobs is the number of finished jobs written (default 1,000,000).
	Jobs int
	// Keep keeps the temporary directory.
	Keep bool
	// Services are those measured, of ledger, rent and output (default
	// all three); the others' figures are 0.
	Services []string
	// HeapProfile, if set, is where each service's heap profile is
	// written once it has caught up, as HeapProfile.<service>.
	HeapProfile string
	// CPUProfile, if set, is where the CPU profile of each service's
	// catch-up is written, as CPUProfile.<service>, of its restart, as
	// CPUProfile.<service>.restart, of the writing of the history, as
	// CPUProfile.write, and of the server's process over the whole bench,
	// as CPUProfile.server.
	CPUProfile string
	// Logger is given to the services (default: discard).
	Logger *slog.Logger
}

// Flags defines o's flags on fs.
func (o *HistoryOptions) Flags(fs *flag.FlagSet) {
	fs.IntVar(&o.Jobs, "jobs", 1_000_000, "finished jobs written")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temporary directory")
	fs.Func("services", "measure only these, comma separated (default ledger,rent,output)", func(v string) error {
		o.Services = strings.Split(v, ",")
		return nil
	})
	fs.StringVar(&o.HeapProfile, "heapprofile", "", "write each service's heap profile, once it has caught up, to FILE.<service>")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of each service's catch-up to FILE.<service>, of its restart to FILE.<service>.restart, and of the server's process to FILE.server")
}

// History writes o.Jobs finished jobs' worth of events (the synthetic log
// of Ledger, about 8 events a job, one job every historyJobGap up to now,
// with OUTPUT's deletions) into a NATS server in a process of its own, as
// a deployment runs it, then starts the services that keep something per
// job (LEDGER, RENT, OUTPUT), one at a time, each alone in this process:
// it catches up with the whole log, and its heap is measured after a
// forced GC, as the live heap of the process less what it was before the
// service started. Each is then stopped and started again, timed until it
// has caught up: a restart.
// Each catch-up and restart is also given in CPU-seconds (user and system)
// of this process and the server's together: on a machine others share,
// the figure that the times depend on.
// The last line it writes is one machine-readable summary ("history jobs=…").
func History(ctx context.Context, out io.Writer, o HistoryOptions) error {
	if o.Jobs <= 0 {
		o.Jobs = 1_000_000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// In a process of its own, the server's index of every subject of the
	// log is not in the services' heap: in this one, their collector
	// marked it again and again, a quarter of each catch-up's CPU at
	// 100,000 jobs and growing with the log, where a deployment's would
	// not.
	ls, err := startLogServerApart(ctx, "history", o.Keep, events.StreamOptions{}, profilePath(o.CPUProfile, "server"))
	if err != nil {
		return err
	}
	defer ls.Close()
	js := ls.js
	fmt.Fprintf(out, "e31 bench history: %d jobs, %d cores, sync=interval, the server in a process of its own, in %s\n", o.Jobs, runtime.NumCPU(), ls.dir)
	start := time.Now()
	stopProfile, err := startCPUProfile(profilePath(o.CPUProfile, "write"))
	if err != nil {
		return err
	}
	n, jobs, err := writeHistory(ctx, js, o.Jobs, historyJobGap, func(_, jobs int) bool { return jobs >= o.Jobs })
	stopProfile()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %d events (%d jobs) in %s\n", n, jobs, time.Since(start).Round(time.Millisecond))

	heap := map[string]float64{}
	restart, catchUp, catchUpCPU := map[string]time.Duration{}, map[string]time.Duration{}, map[string]time.Duration{}
	if len(o.Services) == 0 {
		o.Services = []string{"ledger", "rent", "output"}
	}
	for _, name := range o.Services {
		switch name {
		case "ledger", "rent", "output":
		default:
			return fmt.Errorf("%w: bench history measures ledger, rent and output, not %q", ErrUsage, name)
		}
	}
	for _, name := range o.Services {
		base := liveHeap()
		stop, took, cpu, err := timeService(ctx, ls, name, o.Logger, profilePath(o.CPUProfile, name))
		if err != nil {
			return err
		}
		catchUp[name], catchUpCPU[name] = took, cpu
		heap[name] = max(float64(liveHeap())-float64(base), 0) / (1 << 20)
		if o.HeapProfile != "" {
			if err := writeHeapProfile(o.HeapProfile + "." + name); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "%s: caught up with the log in %s (%.1f cpu-seconds, server included); heap %.1f MiB\n",
			name, took.Round(time.Millisecond), cpu.Seconds(), heap[name])
		if err := stop(); err != nil {
			return err
		}
		stop, restart[name], cpu, err = timeService(ctx, ls, name, o.Logger, profilePath(o.CPUProfile, name+".restart"))
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: restarted in %s (%.1f cpu-seconds, server included)\n", name, restart[name].Round(time.Millisecond), cpu.Seconds())
		if err := stop(); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "history jobs=%d ledger_heap_mib=%.1f rent_heap_mib=%.1f output_heap_mib=%.1f ledger_restart_s=%.3f rent_restart_s=%.3f output_restart_s=%.3f"+
		" ledger_catchup_s=%.1f rent_catchup_s=%.1f output_catchup_s=%.1f ledger_catchup_cpu_s=%.1f rent_catchup_cpu_s=%.1f output_catchup_cpu_s=%.1f total_s=%.1f\n",
		jobs, heap["ledger"], heap["rent"], heap["output"], restart["ledger"].Seconds(), restart["rent"].Seconds(), restart["output"].Seconds(),
		catchUp["ledger"].Seconds(), catchUp["rent"].Seconds(), catchUp["output"].Seconds(),
		catchUpCPU["ledger"].Seconds(), catchUpCPU["rent"].Seconds(), catchUpCPU["output"].Seconds(), time.Since(start).Seconds())
	return nil
}

// timeService is startService timed, in wall time and in the CPU time of
// this process and the server's, and profiled to profile if it is not ""
// (this process only: the server's profile covers its whole life).
func timeService(ctx context.Context, ls *logServer, name string, log *slog.Logger, profile string) (stop func() error, took, cpu time.Duration, err error) {
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return nil, 0, 0, err
	}
	defer stopProfile()
	server0, err := ls.serverCPU()
	if err != nil {
		return nil, 0, 0, err
	}
	start, cpu0 := time.Now(), cpuTime()
	stop, err = startService(ctx, ls.nc, ls.js, name, log)
	took, cpu = time.Since(start), cpuTime()-cpu0
	server1, serr := ls.serverCPU()
	return stop, took, cpu + server1 - server0, errors.Join(err, serr)
}

// liveHeap is the heap in use after a forced collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// startService runs one service, as the stack builds it, until it has
// caught up with the log: it says it is ready (if it can say so), and no
// consumer of the log has anything left to deliver. stop ends it.
func startService(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, name string, log *slog.Logger) (stop func() error, err error) {
	svc, err := stack.NewService(name, nc, js, stack.Configs{}, log)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	stop = func() error {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("bench history: %s: %w", name, err)
		}
		return nil
	}
	ready, _ := svc.(interface{ Ready(context.Context) error })
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			cancel()
			return nil, fmt.Errorf("bench history: %s stopped: %w", name, err)
		case <-ctx.Done():
			_ = stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
		if ready != nil && ready.Ready(ctx) != nil {
			continue
		}
		// A service reads the log through consumers of its own: none yet is
		// not caught up.
		if left, n, err := undelivered(ctx, js); err == nil && n > 0 && left == 0 {
			return stop, nil
		}
	}
}

// undelivered is what the log's consumers have left to deliver or to see
// acknowledged, and how many consumers there are.
func undelivered(ctx context.Context, js jetstream.JetStream) (left uint64, n int, err error) {
	st, err := js.Stream(ctx, events.Stream)
	if err != nil {
		return 0, 0, err
	}
	cons := st.ListConsumers(ctx)
	for info := range cons.Info() {
		left += info.NumPending + uint64(info.NumAckPending)
		n++
	}
	return left, n, cons.Err()
}
