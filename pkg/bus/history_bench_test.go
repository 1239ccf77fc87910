package bus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/events"
)

// A log of many jobs' lives, interleaved as on a busy pool, built once per
// size for the benchmarks that read one job out of it.
type benchLog struct {
	srv  *broker.Server
	dir  string
	js   jetstream.JetStream
	jobs int
	// seqs are the sequences of each job's events, by job index.
	seqs [][8]uint64
	// span are the sequences of spanJob's events: four before every other
	// job's, four after (a job that waited or ran while the whole log was
	// written).
	span [8]uint64
}

// spanJob is the job of a bench log whose events span the whole log.
const spanJob = "job-span"

var (
	benchLogsMu sync.Mutex
	benchLogs   = map[int]*benchLog{}
)

// logOf is a log of n jobs, eight events each, written once per size.
func logOf(b *testing.B, n int) *benchLog {
	b.Helper()
	benchLogsMu.Lock()
	defer benchLogsMu.Unlock()
	if l := benchLogs[n]; l != nil {
		return l
	}
	// The server outlives the benchmark that made it, so that the next one
	// of the same size reads the same log: TestMain stops it.
	dir, err := os.MkdirTemp("", "e31-bench-history-")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := broker.Start(broker.Config{Dir: dir, Sync: broker.SyncInterval, Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	nc, err := srv.Connect("bench")
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
		b.Fatal(err)
	}
	l := &benchLog{srv: srv, dir: dir, js: js, jobs: n, seqs: make([][8]uint64, n)}
	start := time.Now()
	if err := writeSpan(ctx, js, l.span[:4], 0); err != nil {
		b.Fatal(err)
	}
	if err := writeJobs(ctx, js, n, l.seqs); err != nil {
		b.Fatal(err)
	}
	if err := writeSpan(ctx, js, l.span[4:], 4); err != nil {
		b.Fatal(err)
	}
	b.Logf("wrote %d jobs' events in %v", n, time.Since(start).Round(time.Millisecond))
	benchLogs[n] = l
	return l
}

// TestMain stops the servers of the benchmarks' logs and removes them.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, l := range benchLogs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = l.srv.Shutdown(ctx)
		cancel()
		_ = os.RemoveAll(l.dir)
	}
	os.Exit(code)
}

// benchJob is the id of the i-th job of a bench log.
func benchJob(i int) string { return fmt.Sprintf("job-%08d", i) }

// writeSpan publishes spanJob's events from step from of its life, one
// for each of seqs, and records their sequences.
func writeSpan(ctx context.Context, js jetstream.JetStream, seqs []uint64, from int) error {
	l := life()
	for i := range seqs {
		m, err := events.New(spanJob, l[from+i], "e31/bench", benchAt).Msg()
		if err != nil {
			return err
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			return err
		}
		seqs[i] = ack.Sequence
	}
	return nil
}

// benchAt is when a bench log's events say they happened.
var benchAt = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// life is the eight events of a trivial job's whole life.
func life() []events.Event {
	spec := events.JobSpec{Work: events.Work{Command: []string{"/bin/true"}},
		Request: events.Request{CPU: 1, MemoryBytes: 1 << 30, LimitSeconds: 600}}
	h := events.Hold{Attempt: 1, Node: "node-01", CPU: 1, MemoryBytes: 1 << 30}
	zero := 0
	none := events.Collected{Files: []events.OutputFile{}, Missing: []string{}}
	return []events.Event{&events.JobRequested{Submitter: "alice", Spec: spec}, &events.JobSubmitted{Submitter: "alice", Spec: spec},
		&events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec}, &events.RunStarted{Hold: h},
		&events.RunStopped{Hold: h, Outcome: events.Succeeded, ExitCode: &zero, Output: none},
		&events.OutputReturned{Hold: h, Outcome: events.Succeeded, Files: []events.OutputFile{}, Missing: []string{}},
		&events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true},
		&events.DeleteRequested{What: events.WhatOutput, By: "alice"}}
}

// writeJobs publishes n jobs' lives, 48 at a time interleaved step by
// step, and records the sequence of each event.
func writeJobs(ctx context.Context, js jetstream.JetStream, n int, seqs [][8]uint64) error {
	type pending struct {
		job, step int
		ack       jetstream.PubAckFuture
	}
	var acks []pending
	flush := func() error {
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
		for _, p := range acks {
			select {
			case ack := <-p.ack.Ok():
				seqs[p.job][p.step] = ack.Sequence
			case err := <-p.ack.Err():
				return err
			}
		}
		acks = acks[:0]
		return nil
	}
	for wave := 0; wave < n; wave += 48 {
		var lives [][]events.Event
		for j := wave; j < min(wave+48, n); j++ {
			lives = append(lives, life())
		}
		for step := 0; step < 8; step++ {
			for k, l := range lives {
				m, err := events.New(benchJob(wave+k), l[step], "e31/bench", benchAt).Msg()
				if err != nil {
					return err
				}
				f, err := js.PublishMsgAsync(m)
				if err != nil {
					return err
				}
				acks = append(acks, pending{wave + k, step, f})
			}
		}
		if len(acks) >= 2000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// cpu is the CPU time this process (server and client) has used.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchSizes are the log sizes measured: E31_BENCH_JOBS=1000,10000 to
// choose.
func benchSizes() []int {
	s := os.Getenv("E31_BENCH_JOBS")
	if s == "" {
		return []int{1000, 10000, 100000}
	}
	var out []int
	for _, f := range splitComma(s) {
		n, err := strconv.Atoi(f)
		if err == nil {
			out = append(out, n)
		}
	}
	return out
}

func splitComma(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != ',' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

// positions are where in a bench log the job read is: its events among
// the first, the middle or the last jobs', or spanning the whole log.
var positions = []struct {
	name string
	job  func(l *benchLog) (string, [8]uint64)
}{
	{"first", func(l *benchLog) (string, [8]uint64) { return benchJob(0), l.seqs[0] }},
	{"middle", func(l *benchLog) (string, [8]uint64) { return benchJob(l.jobs / 2), l.seqs[l.jobs/2] }},
	{"last", func(l *benchLog) (string, [8]uint64) { return benchJob(l.jobs - 1), l.seqs[l.jobs-1] }},
	{"span", func(l *benchLog) (string, [8]uint64) { return spanJob, l.span }},
}

// BenchmarkReadOneJob reads one job's history out of logs of 1k, 10k and
// 100k jobs (8 events each), the job at each of positions, and reports
// the CPU time each read costs the process (server and client: the
// server is embedded).
func BenchmarkReadOneJob(b *testing.B) {
	for _, n := range benchSizes() {
		for _, where := range positions {
			for _, how := range readers {
				b.Run(fmt.Sprintf("jobs=%d/at=%s/read=%s", n, where.name, how.name), func(b *testing.B) {
					l := logOf(b, n)
					job, seqs := where.job(l)
					last := seqs[7]
					ctx := context.Background()
					b.ResetTimer()
					c0 := cpu()
					for range b.N {
						h, err := how.read(ctx, l.js, job)
						if err != nil {
							b.Fatal(err)
						}
						if len(h.Events) != 8 || h.Last != last {
							b.Fatalf("read %d events to #%d, want 8 to #%d", len(h.Events), h.Last, last)
						}
					}
					b.ReportMetric(float64(cpu()-c0)/float64(b.N), "cpu-ns/op")
				})
			}
		}
	}
}

// readers are the ways of reading one job compared: how ReadHistory read
// before it was bounded (batches of 256 to the end of the log), before it
// read the last message of each subject (counted), and now.
var readers = []struct {
	name string
	read func(ctx context.Context, js jetstream.JetStream, job string) (History, error)
}{
	{"unbounded", func(ctx context.Context, js jetstream.JetStream, job string) (History, error) {
		var h History
		for m, err := range stored(ctx, js, events.JobSubject(job), 1, directBatch) {
			if err != nil {
				return History{}, err
			}
			h.Last = m.Sequence
			if env, err := events.Decode(m.Subject, m.Header, m.Data); err == nil {
				env.Seq = m.Sequence
				h.Events = append(h.Events, env)
			}
		}
		return h, nil
	}},
	{"counted", storedJobCounted},
	{"ReadHistory", func(ctx context.Context, js jetstream.JetStream, job string) (History, error) {
		return ReadHistory(ctx, js, job, 1)
	}},
}

// BenchmarkCatchUp is what a service catching up with a long log does: it
// reacts to every job's RunStopped in turn, finds the job went on after it
// (the append conflicts), reads what came after and decides nothing. It
// reports the time and CPU per job.
func BenchmarkCatchUp(b *testing.B) {
	for _, n := range benchSizes() {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			l := logOf(b, n)
			pub := NewPublisher(l.js, "e31/bench", nil)
			ctx := context.Background()
			b.ResetTimer()
			c0, t0, done := cpu(), time.Now(), 0
			for range b.N {
				for i := range n {
					trigger := events.Envelope{Subject: benchJob(i), Seq: l.seqs[i][4]}
					var seen int
					_, err := pub.React(ctx, trigger, func(after []events.Envelope) ([]events.Event, error) {
						if after == nil {
							return []events.Event{&events.JobRejected{Reason: "never stored"}}, nil
						}
						seen = len(after)
						return nil, nil
					})
					if err != nil || seen != 3 {
						b.Fatalf("react to %s: %d events after, %v; want 3", trigger, seen, err)
					}
					done++
				}
			}
			b.ReportMetric(float64(time.Since(t0))/float64(done), "ns/job")
			b.ReportMetric(float64(cpu()-c0)/float64(done), "cpu-ns/job")
			b.ReportMetric(time.Since(t0).Seconds()/float64(b.N), "s/catch-up")
		})
	}
}

// BenchmarkFirstRequest reads one job's first request (SUBMIT and OUTPUT
// do for every job), as a batch of one (before) and as one message.
func BenchmarkFirstRequest(b *testing.B) {
	for _, n := range benchSizes() {
		for _, where := range []struct {
			name string
			at   func(n int) int
		}{{"first", func(int) int { return 0 }}, {"middle", func(n int) int { return n / 2 }}, {"last", func(n int) int { return n - 1 }}} {
			for _, how := range []struct {
				name string
				read func(ctx context.Context, js jetstream.JetStream, job string) (*jetstream.RawStreamMsg, error)
			}{
				{"batch-of-one", func(ctx context.Context, js jetstream.JetStream, job string) (*jetstream.RawStreamMsg, error) {
					for m, err := range stored(ctx, js, events.RequestSubject(job, "*"), 1, 1) {
						return m, err
					}
					return nil, jetstream.ErrMsgNotFound
				}},
				{"FirstRequest", FirstRequest},
			} {
				b.Run(fmt.Sprintf("jobs=%d/at=%s/read=%s", n, where.name, how.name), func(b *testing.B) {
					l := logOf(b, n)
					i := where.at(n)
					ctx := context.Background()
					b.ResetTimer()
					c0 := cpu()
					for range b.N {
						m, err := how.read(ctx, l.js, benchJob(i))
						if err != nil || m.Sequence != l.seqs[i][0] {
							b.Fatalf("first request %v, %v; want #%d", m, err, l.seqs[i][0])
						}
					}
					b.ReportMetric(float64(cpu()-c0)/float64(b.N), "cpu-ns/op")
				})
			}
		}
	}
}

// storedJobCounted is how StoredJob read before it asked for the last
// message of each subject: a batch of one says how many messages the job
// has, the next asks for exactly that many from the start of the log. The
// server scans the log between the job's first message and its last.
func storedJobCounted(ctx context.Context, js jetstream.JetStream, job string) (History, error) {
	var h History
	filter := events.JobSubject(job)
	g, err := newGetter(ctx, js, events.Stream, directBatch)
	if err != nil {
		return h, err
	}
	defer g.close()
	_, pending, err := g.batch(filter, 1, 1, func(*jetstream.RawStreamMsg, error) bool { return true })
	if err != nil {
		return h, err
	}
	total, read := pending+1, uint64(0)
	pass := func(m *jetstream.RawStreamMsg, _ error) bool {
		read++
		h.Last = m.Sequence
		if env, err := events.Decode(m.Subject, m.Header, m.Data); err == nil {
			env.Seq = m.Sequence
			h.Events = append(h.Events, env)
		}
		return true
	}
	for seq := uint64(1); read < total; {
		next, _, err := g.batch(filter, seq, int(min(total-read, directBatch)), pass)
		if err != nil || next == seq {
			return h, err
		}
		seq = next
	}
	return h, nil
}

// BenchmarkAnythingNew asks the log's leader whether a job has anything
// past its last message, as the gate does before it answers a node: the
// first message after it (before), or the job's last message.
func BenchmarkAnythingNew(b *testing.B) {
	for _, n := range benchSizes() {
		for _, where := range positions {
			for _, how := range []struct {
				name string
				new  func(ctx context.Context, js jetstream.JetStream, job string, last uint64) (bool, error)
			}{
				{"LeaderNext", func(ctx context.Context, js jetstream.JetStream, job string, last uint64) (bool, error) {
					_, err := LeaderNext(ctx, js, events.Stream, events.JobSubject(job), last+1)
					if errors.Is(err, jetstream.ErrMsgNotFound) {
						return false, nil
					}
					return err == nil, err
				}},
				{"LeaderLast", func(ctx context.Context, js jetstream.JetStream, job string, last uint64) (bool, error) {
					m, err := LeaderLast(ctx, js, events.Stream, events.JobSubject(job))
					if err != nil {
						return false, err
					}
					return m.Sequence > last, nil
				}},
			} {
				b.Run(fmt.Sprintf("jobs=%d/at=%s/read=%s", n, where.name, how.name), func(b *testing.B) {
					l := logOf(b, n)
					job, seqs := where.job(l)
					ctx := context.Background()
					b.ResetTimer()
					c0 := cpu()
					for range b.N {
						if isNew, err := how.new(ctx, l.js, job, seqs[7]); err != nil || isNew {
							b.Fatalf("anything new past #%d: %v, %v", seqs[7], isNew, err)
						}
					}
					b.ReportMetric(float64(cpu()-c0)/float64(b.N), "cpu-ns/op")
				})
			}
		}
	}
}
