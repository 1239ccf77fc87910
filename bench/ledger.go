package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/services/ledger"
	"github.com/e31net/e31/services/output/retention"
)

// LedgerOptions is what Ledger measures.
type LedgerOptions struct {
	// Events is the number of synthetic events written.
	Events int
	// Profile, if set, is where CPU profiles of the audit's replay (and of
	// the ledger's rebuild, in PROFILE.ledger, and of this process while
	// e31 audit runs, in PROFILE.whole) are written, and the heap the
	// audit holds at its end (PROFILE.heap).
	Profile string
	// Keep keeps the temporary directory.
	Keep bool
	// E31 is the e31 binary whose `e31 audit` is timed, in a process of
	// its own, against the log and the rebuilt ledger.
	E31 string
}

// Ledger writes o.Events synthetic but valid job events (about 8 a job:
// successes, failures, cancels, lost nodes held again, rejections,
// deletions, over 16 nodes) into an embedded server with sync interval,
// then times the audit's independent replay of the whole log and the
// LEDGER's rebuild from scratch. Both must find the log whole and agree on
// its chain head, or its error wraps ErrFailed. The last line it writes is
// one machine-readable summary ("bench-ledger events=…").
func Ledger(ctx context.Context, out io.Writer, o LedgerOptions) error {
	ls, err := startLogServer(ctx, "ledger", o.Keep, events.StreamOptions{})
	if err != nil {
		return err
	}
	defer ls.Close()
	nc, js := ls.nc, ls.js
	fmt.Fprintf(out, "e31 bench ledger: %d cores, sync=interval, in %s\n", runtime.NumCPU(), ls.dir)

	start := time.Now()
	n, jobs, err := writeSyntheticLog(ctx, js, o.Events)
	if err != nil {
		return err
	}
	wrote := time.Since(start)
	fmt.Fprintf(out, "wrote %d events (%d jobs) in %s: %.0f events/s, published asynchronously\n", n, jobs, wrote.Round(time.Millisecond), float64(n)/wrote.Seconds())

	// The floor: reading alone, through NATS, with the server on the same cores.
	readHeap := watchHeap()
	start, cpu0 := time.Now(), cpuTime()
	read, err := readOnly(ctx, js)
	if err != nil {
		readHeap()
		return fmt.Errorf("bench ledger: read the log: %w", err)
	}
	readTook, readCPU := time.Since(start), cpuTime()-cpu0
	// The heap reading alone takes (the server's caches of what it reads,
	// the client's buffers): the audit's figure includes as much.
	fmt.Fprintf(out, "read only (the floor): %d events in %s (%.1f cpu-seconds, server included): %.0f events/s, %.1f MiB of heap at most\n",
		read, readTook.Round(time.Millisecond), readCPU.Seconds(), float64(read)/readTook.Seconds(), float64(readHeap())/(1<<20))

	// The audit's replay, as `e31 audit` runs it.
	stopProfile, err := startCPUProfile(o.Profile)
	if err != nil {
		return err
	}
	heap := watchHeap()
	// As `e31 audit` runs it (audit.TuneGC), and only while it runs.
	restoreGC := audit.TuneGC()
	start, cpu0 = time.Now(), cpuTime()
	au := audit.New(auditOptions)
	if err := au.ReadStream(ctx, js); err != nil {
		heap()
		restoreGC()
		stopProfile()
		return err
	}
	rep := au.Finish()
	auditTook, auditCPU := time.Since(start), cpuTime()-cpu0
	restoreGC()
	auditHeap := heap()
	stopProfile()
	if o.Profile != "" {
		// What the audit still holds at its end (the auditor is live).
		if err := writeHeapProfile(o.Profile + ".heap"); err != nil {
			return err
		}
	}
	auditRate := float64(rep.Events) / auditTook.Seconds()
	fmt.Fprintf(out, "audit replay: %d events, %d jobs in %s (%.1f cpu-seconds, server included): %.0f events/s, %.2f of the floor, %.1f MiB of heap at most; %s\n",
		rep.Events, rep.Jobs, auditTook.Round(time.Millisecond), auditCPU.Seconds(), auditRate, auditRate/(float64(read)/readTook.Seconds()),
		float64(auditHeap)/(1<<20), rep.Summary())
	if !rep.OK() {
		for _, f := range rep.Findings[:min(len(rep.Findings), 10)] {
			fmt.Fprintf(out, "  %s %s #%d: %s\n", f.Kind, f.Job, f.Seq, f.Detail)
		}
		return fmt.Errorf("%w: bench ledger: the audit found the synthetic log wrong", ErrFailed)
	}
	auditHead := rep.Head
	rep, au = nil, nil
	runtime.GC()

	// The ledger's rebuild from scratch, as on every start.
	stopProfile, err = startCPUProfile(profilePath(o.Profile, "ledger"))
	if err != nil {
		return err
	}
	defer stopProfile() // on the ways out before the rebuild is over
	start, cpu0 = time.Now(), cpuTime()
	svc, err := ledger.New(nc, js, ledger.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	select {
	case <-svc.CaughtUp():
	case err := <-done:
		stop()
		return fmt.Errorf("bench ledger: the ledger stopped: %w", err)
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
	rebuilt, rebuildCPU := time.Since(start), cpuTime()-cpu0
	stopProfile()
	var info wire.LedgerInfo
	err = askJSON(ctx, nc, wire.LedgerSubject(events.Operator, wire.EndpointHead), &info)
	ledgerHead := info.Head.String()
	var whole wholeAudit
	if err == nil {
		// What the server and the ledger spend while the audit runs
		// (serving its reads of the log and of the ledger's bucket, and
		// flushing) is profiled here.
		var stopWhole func()
		if stopWhole, err = startCPUProfile(profilePath(o.Profile, "whole")); err == nil {
			whole, err = auditWhole(ctx, o.E31, ls.srv.ClientURL(), profilePath(o.Profile, "audit"))
			stopWhole()
		}
	}
	stop()
	if rerr := <-done; rerr != nil && !errors.Is(rerr, context.Canceled) {
		return rerr
	}
	if err != nil {
		return err
	}
	restart, err := LedgerRestart(ctx, nc, js)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ledger rebuild from scratch: %d events in %s (%.1f cpu-seconds, server included): %.0f events/s\n",
		n, rebuilt.Round(time.Millisecond), rebuildCPU.Seconds(), float64(n)/rebuilt.Seconds())
	if ledgerHead != auditHead.String() {
		return fmt.Errorf("%w: bench ledger: the ledger's head %s is not the audit's %s", ErrFailed, ledgerHead, auditHead)
	}
	fmt.Fprintf(out, "the ledger and the audit agree on the chain head %s\n", auditHead)
	fmt.Fprintf(out, "ledger restart from its checkpoint: %s\n", restart.Round(time.Millisecond))
	fmt.Fprintf(out, "e31 audit in a process of its own, compared with the ledger's records: %s (%.1f cpu-seconds, and %.1f of the server and the ledger answering it), %.1f MiB resident at most; %s\n",
		whole.took.Round(time.Millisecond), whole.cpu.Seconds(), whole.served.Seconds(), float64(whole.rss)/(1<<20), whole.summary)
	fmt.Fprintf(out, "bench-ledger events=%d jobs=%d write_per_s=%.0f read_only_per_s=%.0f audit_s=%.3f audit_per_s=%.0f ledger_rebuild_s=%.3f ledger_per_s=%.0f audit_cpu_s=%.2f ledger_cpu_s=%.2f ledger_restart_s=%.3f cores=%d audit_heap_mib=%.1f whole_audit_s=%.3f whole_audit_rss_mib=%.1f\n",
		n, jobs, float64(n)/wrote.Seconds(), float64(read)/readTook.Seconds(), auditTook.Seconds(), auditRate, rebuilt.Seconds(), float64(n)/rebuilt.Seconds(),
		auditCPU.Seconds(), rebuildCPU.Seconds(), restart.Seconds(), runtime.NumCPU(), float64(auditHeap)/(1<<20),
		whole.took.Seconds(), float64(whole.rss)/(1<<20))
	return nil
}

// wholeAudit is what one run of `e31 audit` took.
type wholeAudit struct {
	took time.Duration
	rss  uint64 // the process's peak resident memory, bytes
	// cpu is the process's CPU time (user and system); served is this
	// process's meanwhile: the server reading the log and the ledger's
	// bucket for it, and the ledger (its head, its flushes).
	cpu, served time.Duration
	summary     string
}

// auditWhole runs `e31 audit` (the e31 binary at exe) in a process of its
// own against the server at url, as an auditor does: the replay of the
// log, then the comparison with every record the ledger has, read from
// its bucket, with a ledger running (its head, and the checkpoint the
// audit waits for). The comparison's cost grows with the
// records, not with the log's events, so the replay's figures do not tell
// it; and the process's peak memory is its own, where a heap measured in
// this one would count the server's and the ledger's. With a profile, the
// process writes its CPU profile there.
func auditWhole(ctx context.Context, exe, url, profile string) (wholeAudit, error) {
	args := []string{"audit", "--nats", url, "--json"}
	if profile != "" {
		args = append(args, "--cpuprofile", profile)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	// No credentials: an embedded server without authentication takes the
	// operator, and no e31 dev's may be picked up.
	cmd.Env = append(os.Environ(), "E31_CREDS=", "E31_NATS=", "E31_LOG=warn", "XDG_CONFIG_HOME="+os.TempDir()+"/e31-bench-none")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start, cpu0 := time.Now(), cpuTime()
	if err := cmd.Start(); err != nil {
		return wholeAudit{}, fmt.Errorf("bench ledger: %s audit: %w", exe, err)
	}
	// The process's own high-water mark, read as it runs: its rusage's
	// would be this process's, which it was forked from (vfork shares the
	// memory until exec, and the kernel keeps the larger of the two). A
	// high-water mark only grows, so a read now and then misses only what
	// the last moments added; a read of /proc/<pid>/status costs about a
	// millisecond of this process, which the audit would share the cores
	// with at every 20 ms.
	stopRSS := peakOf(100*time.Millisecond, func() uint64 { return highWater(cmd.Process.Pid) })
	err := cmd.Wait()
	took, served := time.Since(start), cpuTime()-cpu0
	rss := stopRSS()
	var rep struct {
		Events   int             `json:"events"`
		Jobs     int             `json:"jobs"`
		Compared int             `json:"compared"`
		Findings []audit.Finding `json:"findings"`
	}
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil || err != nil && len(rep.Findings) == 0 {
		return wholeAudit{}, fmt.Errorf("bench ledger: %s audit: %v %v: %s", exe, err, jerr, bytes.TrimSpace(errOut.Bytes()))
	}
	if len(rep.Findings) > 0 {
		f := rep.Findings[0]
		return wholeAudit{}, fmt.Errorf("%w: bench ledger: e31 audit found %d things wrong, the first %s %s #%d: %s",
			ErrFailed, len(rep.Findings), f.Kind, f.Job, f.Seq, f.Detail)
	}
	return wholeAudit{took: took, rss: rss, served: served, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(),
		summary: fmt.Sprintf("%d events, %d jobs, %d records compared, nothing found", rep.Events, rep.Jobs, rep.Compared)}, nil
}

// highWater is process pid's peak resident memory so far (VmHWM), in
// bytes; 0 if it cannot be read (the process is gone).
func highWater(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if kib, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(kib), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

// LedgerRestart starts a LEDGER over a log it has already folded in and
// stopped after (so its bucket holds a checkpoint), and times it from its
// start until it has caught up with the log: a restart.
func LedgerRestart(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (time.Duration, error) {
	start := time.Now()
	svc, err := ledger.New(nc, js, ledger.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return 0, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	select {
	case <-svc.CaughtUp():
	case err := <-done:
		return 0, fmt.Errorf("bench: the restarted ledger stopped: %w", err)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	took := time.Since(start)
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return 0, err
	}
	return took, nil
}

// auditOptions are the audit's as `e31 audit` runs it (pkg/client.Audit).
var auditOptions = audit.Options{Forget: true}

// watchHeap follows the live heap (as the last collection found it) until
// the function it returns is called, which returns the most it grew above
// where it was, after one last collection: what the audit held at most,
// give or take what the embedded server caches meanwhile.
func watchHeap() func() uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := live()
	stop := peakOf(10*time.Millisecond, live)
	return func() uint64 {
		peak := stop()
		runtime.GC()
		peak = max(peak, live())
		return peak - min(base, peak)
	}
}

// peakOf samples read every interval until the function it returns is
// called, which returns the most read gave.
func peakOf(every time.Duration, read func() uint64) (stop func() uint64) {
	var peak uint64
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(quit)
		<-done
		return peak
	}
}

// askJSON asks a query endpoint, as the user its subject names, and
// decodes the reply.
func askJSON(ctx context.Context, nc *nats.Conn, subject string, reply any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := query.Ask(ctx, nc, subject, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	return nil
}

// syntheticJobs is one round of the synthetic log: six jobs, 48 events,
// so eight a job, covering every path of a job's life.
func syntheticJobs(round int, base time.Time) [][]events.Envelope {
	const nodes = 16
	spec := events.JobSpec{Name: "bench", Work: events.Work{Command: []string{"/bin/sh", "-c", "true"}},
		Request: events.Request{CPU: 1, MemoryBytes: 2 << 30, GPU: 0, DiskBytes: 1 << 30, LimitSeconds: 600}}
	gpuSpec := spec
	gpuSpec.Request.GPU = 1
	zero, three := 0, 3
	none := events.Collected{Files: []events.OutputFile{}, Missing: []string{}}
	out := make([][]events.Envelope, 0, 6)
	for k := 0; k < 6; k++ {
		i := round*6 + k
		job := fmt.Sprintf("job-%08d", i)
		who := fmt.Sprintf("team-%d", i%7)
		s := spec
		if k == 0 {
			s = gpuSpec
		}
		node := func(attempt int) string { return fmt.Sprintf("node-%02d", (i+attempt)%nodes) }
		hold := func(attempt int) events.Hold {
			return events.Hold{Attempt: attempt, Node: node(attempt), CPU: s.Request.CPU, MemoryBytes: s.Request.MemoryBytes,
				GPU: s.Request.GPU, DiskBytes: s.Request.DiskBytes}
		}
		var evs []events.Event
		add := func(e ...events.Event) { evs = append(evs, e...) }
		run := func(h events.Hold, outcome events.Outcome, exit *int, final bool) {
			// As RUN reports them: a job that succeeded wrote nothing
			// (and stored no log), one that failed said why on stderr.
			logs := &events.Logs{}
			if outcome == events.Failed {
				logs.StderrBytes = 120
			}
			add(&events.ComputeHeld{Hold: h, Submitter: who, Spec: s}, &events.RunStarted{Hold: h},
				&events.RunStopped{Hold: h, Outcome: outcome, ExitCode: exit, Usage: events.Usage{CPUSeconds: 0.5, MaxRSSBytes: 64 << 20}, Output: none, Logs: logs},
				&events.OutputReturned{Hold: h, Outcome: outcome, Files: []events.OutputFile{}, Missing: []string{}},
				&events.ComputeReleased{Hold: h, Outcome: outcome, Final: final})
		}
		add(&events.JobRequested{Submitter: who, Spec: s})
		switch k {
		case 0: // succeeded (7)
			add(&events.JobSubmitted{Submitter: who, Spec: s})
			run(hold(1), events.Succeeded, &zero, true)
		case 1: // failed (7)
			add(&events.JobSubmitted{Submitter: who, Spec: s})
			run(hold(1), events.Failed, &three, true)
		case 2: // cancelled while it ran (8)
			h := hold(1)
			add(&events.JobSubmitted{Submitter: who, Spec: s}, &events.ComputeHeld{Hold: h, Submitter: who, Spec: s}, &events.RunStarted{Hold: h},
				&events.CancelRequested{By: who}, &events.RunStopped{Hold: h, Outcome: events.Cancelled, Output: none},
				&events.OutputReturned{Hold: h, Outcome: events.Cancelled, Partial: true, Files: []events.OutputFile{}, Missing: []string{}},
				&events.ComputeReleased{Hold: h, Outcome: events.Cancelled, Final: true})
		case 3: // its node restarted while it ran, then it succeeded (12)
			add(&events.JobSubmitted{Submitter: who, Spec: s})
			run(hold(1), events.NodeLost, nil, false)
			run(hold(2), events.Succeeded, &zero, true)
		case 4: // rejected (2)
			add(&events.JobRejected{Reason: "request.limit: required"})
		case 5: // its node's lease lapsed, then it ran out of memory; its output deleted (12)
			h := hold(1)
			add(&events.JobSubmitted{Submitter: who, Spec: s}, &events.ComputeHeld{Hold: h, Submitter: who, Spec: s}, &events.RunStarted{Hold: h},
				&events.HoldLost{Hold: h, Reason: "the node's lease lapsed"}, &events.ComputeReleased{Hold: h, Outcome: events.NodeLost})
			run(hold(2), events.OutOfMemory, nil, true)
			add(&events.DeleteRequested{What: events.WhatOutput, By: who})
		}
		envs := make([]events.Envelope, len(evs))
		for j, ev := range evs {
			envs[j] = events.New(job, ev, "e31/bench", base)
		}
		out = append(out, envs)
	}
	return out
}

// historyJobGap is the time between two jobs of the synthetic log: about
// 2,900 jobs a day, a million a year. A history is made over time, and
// what a service keeps by time (OUTPUT keeps each job's stored data and
// logs until its retention passes) is bounded by the jobs of that time,
// not by the history: with every job of a long history stamped within the
// last minutes, the log would be one that no site writes, in which every
// job is still within its retention.
const historyJobGap = 30 * time.Second

// outputSource is the source of the deletions OUTPUT would have recorded.
const outputSource = "e31/output/bench"

// writeSyntheticLog publishes at least n events: node announcements, then
// rounds of jobs whose lives interleave, as jobs on a busy pool do, with
// what OUTPUT records about them (see writeHistory). It publishes
// asynchronously, waiting for acknowledgements now and then. It is
// writeHistory for a number of events.
func writeSyntheticLog(ctx context.Context, js jetstream.JetStream, n int) (written, jobs int, err error) {
	return writeHistory(ctx, js, (n+7)/8, historyJobGap, func(written, _ int) bool { return written >= n })
}

// writeHistory publishes the synthetic log until enough says so; about
// jobs jobs (it may be off a little) place the log's last event at about
// now: the first job started jobs×gap ago. Each job's life is
// the one syntheticJobs gives, and the log also carries what OUTPUT would
// have recorded of it, decided by OUTPUT's own rules (retention.DecideDelete):
// the deletion its submitter asked for once it is over, and the expiry of
// what it stored once its retention has passed, for every job whose
// retention passed before now.
func writeHistory(ctx context.Context, js jetstream.JetStream, jobs int, gap time.Duration, enough func(written, jobs int) bool) (written, wrote int, err error) {
	const perBatch = 48 // eight rounds of six jobs
	end := time.Now().UTC()
	batches := (jobs + perBatch - 1) / perBatch
	clock := end.Add(-time.Duration(batches*perBatch) * gap)
	pending := 0
	publish := func(env events.Envelope) error {
		m, err := env.Msg()
		if err != nil {
			return err
		}
		if _, err := js.PublishMsgAsync(m); err != nil {
			return fmt.Errorf("bench: publish: %w", err)
		}
		written++
		if pending++; pending == 2000 {
			pending = 0
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	for i := 0; i < 16; i++ {
		name := fmt.Sprintf("node-%02d", i)
		if err := publish(events.New(name, &events.NodeAnnounced{Node: name, Boot: "b1", CPU: 16, MemoryBytes: 64 << 30, GPU: 4, DiskBytes: 1 << 40}, "e31/bench", clock)); err != nil {
			return written, wrote, err
		}
	}
	// The expiries OUTPUT records, in order of time (each batch's come
	// after the batch before's): each is published in the first batch at
	// or after its time, stamped with that batch's start.
	var due []events.Envelope
	flush := func(until time.Time) error {
		n := 0
		for n < len(due) && !due[n].Time.After(until) {
			due[n].Time = clock
			if err := publish(due[n]); err != nil {
				return err
			}
			n++
		}
		due = due[n:]
		return nil
	}
	for round := 0; !enough(written, wrote); round += perBatch / 6 {
		if err := flush(clock); err != nil {
			return written, wrote, err
		}
		var lives [][]events.Envelope
		for r := round; r < round+perBatch/6; r++ {
			lives = append(lives, syntheticJobs(r, clock)...)
		}
		wrote += len(lives)
		// The batch's events are spread evenly over its jobs' time.
		count := 0
		for _, life := range lives {
			count += len(life)
		}
		step := perBatch * gap / time.Duration(count)
		for k := 0; ; k++ {
			more := false
			for _, life := range lives {
				if k < len(life) {
					more = true
					clock = clock.Add(step)
					life[k].Time = clock
					if err := publish(life[k]); err != nil {
						return written, wrote, err
					}
				}
			}
			if !more {
				break
			}
		}
		// The deletions asked for are recorded as the jobs end: after
		// the batch.
		var expired []events.Envelope
		for _, life := range lives {
			asked, later := outputDeletions(life, end)
			for _, env := range asked {
				env.Time = clock
				if err := publish(env); err != nil {
					return written, wrote, err
				}
			}
			expired = append(expired, later...)
		}
		slices.SortStableFunc(expired, func(a, b events.Envelope) int { return a.Time.Compare(b.Time) })
		due = append(due, expired...)
	}
	// Those due since the last batch began, up to now.
	if err := flush(end); err != nil {
		return written, wrote, err
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return written, wrote, ctx.Err()
	}
	return written, wrote, nil
}

// outputDeletions are the Deleted events OUTPUT records about a job whose
// life is given, before end: at its end, those its submitter asked for
// (asked); a retention later, those of what it still stores (expired).
// Each is stamped with the time it is due.
func outputDeletions(life []events.Envelope, end time.Time) (asked, expired []events.Envelope) {
	job, over := life[0].Subject, life[len(life)-1].Time
	for _, ev := range retention.DecideDelete(life, over) {
		asked = append(asked, events.New(job, ev, outputSource, over))
	}
	expires := over.Add(events.DefaultRetention)
	if expires.After(end) {
		return asked, nil
	}
	for _, ev := range retention.DecideDelete(append(slices.Clip(life), asked...), expires) {
		expired = append(expired, events.New(job, ev, outputSource, expires))
	}
	return asked, expired
}

// cpuTime is the CPU time this process has used, user and system: on a
// machine others share, the figure that wall-clock rates depend on.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readOnly reads every message of the log through an ordered consumer and
// does nothing else: the floor under any replay on this machine.
func readOnly(ctx context.Context, js jetstream.JetStream) (int, error) {
	cons, err := js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, err
	}
	pending := cons.CachedInfo().NumPending
	iter, err := cons.Messages(jetstream.PullMaxMessages(2048))
	if err != nil {
		return 0, err
	}
	defer iter.Stop()
	n := 0
	for read := uint64(0); read < pending; read++ {
		m, err := iter.Next()
		if err != nil {
			return n, err
		}
		md, err := m.Metadata()
		if err != nil {
			return n, err
		}
		n++
		if md.NumPending == 0 {
			break
		}
	}
	return n, nil
}
