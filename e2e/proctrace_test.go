package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The trace a job leaves outside e31: the kernel's process table. A job
// that runs under a name of the form traceName gives its shell that name
// ($0), and the test reads /proc every few milliseconds, as root, for the
// processes that bear it: the sandbox's, the container engine's and plain
// child processes alike are processes of this machine's kernel. An
// attempt ran from the first moment one of its processes was seen to the
// last: a job killed with SIGKILL leaves no last line of its own, and its
// processes tell when it ended all the same.

// traceName is the name an attempt's shell runs under: "e31trace-<job>-<attempt>".
const tracePrefix = "e31trace-"

// tracedCommand is a job's command that runs script under its trace name,
// by exec, so that the name is the job's first process's for its whole
// life. script must not contain a single quote.
func tracedCommand(script string) []string {
	return []string{"/bin/sh", "-c", fmt.Sprintf(`exec /bin/sh -c '%s' "%s$E31_JOB_ID-$E31_ATTEMPT"`, script, tracePrefix)}
}

// span is when an attempt's processes were seen.
type span struct{ first, last time.Time }

// procTrace watches the process table for traced attempts.
type procTrace struct {
	every time.Duration
	mu    sync.Mutex
	spans map[string]*span // by "<job>-<attempt>"
	// pids caches what each pid is: its attempt, or "" for none, with
	// when it was first read (a process is named by its exec, so one read
	// as nothing is read again for a while).
	pids map[int]pidName
}

type pidName struct {
	name  string
	since time.Time
}

// watchProcs reads the process table every `every` until the test ends.
func watchProcs(t *testing.T, every time.Duration) *procTrace {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: reading every process's command line, the sandbox's and the containers' included")
	}
	p := &procTrace{every: every, spans: map[string]*span{}, pids: map[int]pidName{}}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			p.scan()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { stop(); <-done })
	return p
}

// scan reads the process table once.
func (p *procTrace) scan() {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	now := time.Now()
	seen := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		seen[pid] = true
		p.mu.Lock()
		known, ok := p.pids[pid]
		p.mu.Unlock()
		if !ok || known.name == "" && now.Sub(known.since) < 2*time.Second {
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil {
				continue
			}
			name := ""
			for _, arg := range bytes.Split(b, []byte{0}) {
				if s := string(arg); strings.HasPrefix(s, tracePrefix) && !strings.Contains(s, "$") {
					name = strings.TrimPrefix(s, tracePrefix)
				}
			}
			if !ok {
				known.since = now
			}
			known.name = name
			p.mu.Lock()
			p.pids[pid] = known
			p.mu.Unlock()
		}
		if known.name == "" {
			continue
		}
		p.mu.Lock()
		s := p.spans[known.name]
		if s == nil {
			s = &span{first: now}
			p.spans[known.name] = s
		}
		s.last = now
		p.mu.Unlock()
	}
	p.mu.Lock()
	for pid := range p.pids {
		if !seen[pid] {
			delete(p.pids, pid)
		}
	}
	p.mu.Unlock()
}

// span is when attempt of job was seen running, and whether it was.
func (p *procTrace) span(job string, attempt int) (span, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.spans[fmt.Sprintf("%s-%d", job, attempt)]
	if !ok {
		return span{}, false
	}
	return *s, true
}

// waitRunning waits until attempt of job is seen running.
func (p *procTrace) waitRunning(ctx context.Context, t *testing.T, job string, attempt int) {
	t.Helper()
	for {
		if _, ok := p.span(job, attempt); ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("attempt %d of %s never seen running", attempt, job)
		case <-time.After(p.every):
		}
	}
}

// overlaps checks that no two attempts of each job in ids ran at once,
// by the process table, and returns, for each job run more than once, the
// gap from each attempt's end to the next one's start (negative: they
// overlapped). An attempt's end is known to within the watch's period.
func (p *procTrace) overlaps(t *testing.T, ids []string) (gaps []time.Duration) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		type run struct {
			span
			attempt int
		}
		var runs []run
		for a := 1; ; a++ {
			s, ok := p.spans[fmt.Sprintf("%s-%d", id, a)]
			if !ok {
				if a > 5 {
					break
				}
				continue
			}
			runs = append(runs, run{*s, a})
		}
		sort.SliceStable(runs, func(i, j int) bool { return runs[i].first.Before(runs[j].first) })
		for i := 1; i < len(runs); i++ {
			gap := runs[i].first.Sub(runs[i-1].last)
			gaps = append(gaps, gap)
			if gap <= 0 {
				const at = "15:04:05.000"
				t.Errorf("job %s: two attempts ran at once: attempt %d seen from %s until %s, attempt %d from %s until %s (%s of overlap)",
					id, runs[i-1].attempt, runs[i-1].first.Format(at), runs[i-1].last.Format(at),
					runs[i].attempt, runs[i].first.Format(at), runs[i].last.Format(at), -gap)
			}
		}
	}
	return gaps
}
