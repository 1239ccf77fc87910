package executor

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

func TestStopsPutSigkillAtTheDeadlineAndSigtermAGraceBefore(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		spec       Spec
		term, kill time.Duration // after start; -1: none
	}{
		{"limit from the start", Spec{Limit: 10 * time.Second, Grace: time.Second}, 9 * time.Second, 10 * time.Second},
		{"deadline given", Spec{Limit: time.Minute, Deadline: start.Add(5 * time.Second), Grace: time.Second}, 4 * time.Second, 5 * time.Second},
		{"grace longer than what is left", Spec{Deadline: start.Add(time.Second), Grace: 3 * time.Second}, 0, time.Second},
		{"no limit", Spec{Grace: time.Second}, -1, -1},
	}
	for _, c := range cases {
		term, kill := c.spec.Stops(start)
		at := func(d time.Duration) time.Time {
			if d < 0 {
				return time.Time{}
			}
			return start.Add(d)
		}
		if !term.Equal(at(c.term)) || !kill.Equal(at(c.kill)) {
			t.Errorf("%s: SIGTERM at %s, SIGKILL at %s; want %s and %s", c.name, term, kill, at(c.term), at(c.kill))
		}
	}
}

func TestGraceIsAtMostATenthOfTheLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ limit, grace, want time.Duration }{
		{10 * time.Minute, 10 * time.Second, 10 * time.Second},
		{3 * time.Second, 10 * time.Second, 300 * time.Millisecond},
		{0, time.Second, 0},
	} {
		if got := GraceFor(c.limit, c.grace); got != c.want {
			t.Errorf("GraceFor(%s, %s) = %s, want %s", c.limit, c.grace, got, c.want)
		}
	}
	now := time.Now()
	if got := KillBy(now, 10*time.Second, now.Add(time.Second)); !got.Equal(now.Add(time.Second)) {
		t.Errorf("a cancel's SIGKILL comes after the limit's: %s", got.Sub(now))
	}
}

// A job that ignores SIGTERM is killed at its deadline, not a grace period
// after it.
func TestProcessIgnoringTermIsKilledAtItsDeadline(t *testing.T) {
	t.Parallel()
	p, err := NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	ws, err := p.Prepare(context.Background(), Spec{JobID: "stubborn", Attempt: 1,
		Command: []string{"/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"},
		Limit:   time.Second, Deadline: deadline, Grace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ws.Release(); err != nil {
			t.Errorf("release the workspace: %v", err)
		}
	}()
	res, err := ws.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != events.LimitExceeded {
		t.Errorf("outcome %s (%s), want limit_exceeded", res.Outcome, res.Reason)
	}
	if late := res.Stopped.Sub(deadline); late > 500*time.Millisecond {
		t.Errorf("stopped %s after its deadline", late)
	}
}

// With Spec.Stdout set, the job's output goes there through pipes, all of
// it by the time Run returns, even when a child it left holds the pipe.
func TestProcessOutputGoesToTheSpecsWriters(t *testing.T) {
	t.Parallel()
	p, err := NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	ws, err := p.Prepare(context.Background(), Spec{JobID: "talker", Attempt: 1,
		Command: []string{"/bin/sh", "-c", "sleep 30 & echo out; echo err >&2; exit 4"},
		Limit:   time.Minute, Grace: time.Second, Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ws.Release(); err != nil {
			t.Errorf("release the workspace: %v", err)
		}
	}()
	start := time.Now()
	res, err := ws.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != events.Failed || out.String() != "out\n" || errOut.String() != "err\n" {
		t.Errorf("outcome %s, stdout %q, stderr %q", res.Outcome, out.String(), errOut.String())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %s: the child left behind held it", d)
	}
}

// A job handle runs once at a time, never after it was released, and
// releases once.
func TestJobHandleRunsOnceAtATimeAndNotAfterRelease(t *testing.T) {
	t.Parallel()
	p, err := NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fifo := dir + "/go"
	j, err := p.Prepare(context.Background(), Spec{JobID: "guarded", Attempt: 1,
		Command: []string{"/bin/sh", "-c", "echo up > " + dir + "/started; read x < " + fifo},
		Limit:   time.Minute, Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The job says it runs by writing to a FIFO, whose opening waits for it.
	if err := syscall.Mkfifo(dir+"/started", 0o600); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() {
		b, err := os.ReadFile(dir + "/started")
		if err == nil && len(b) == 0 {
			err = errors.New("nothing written")
		}
		started <- err
	}()
	ran := make(chan error, 1)
	go func() {
		_, err := j.Run(context.Background())
		ran <- err
	}()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("the job's start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	if _, err := j.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Errorf("a second Run while the first runs: %v, want ErrRunning", err)
	}
	released := make(chan error, 1)
	go func() { released <- j.Release() }()
	select {
	case err := <-released:
		t.Fatalf("Release returned (%v) while the job ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(j.Dirs().Root); !os.IsNotExist(err) {
		t.Errorf("workspace %s left after Release: %v", j.Dirs().Root, err)
	}
	if _, err := j.Run(context.Background()); !errors.Is(err, ErrReleased) {
		t.Errorf("Run after Release: %v, want ErrReleased", err)
	}
	if err := j.Release(); err != nil {
		t.Errorf("a second Release: %v", err)
	}
}

// TestCancelKillComesByTheStopsDeadline: a job cancelled with a StopBy gets
// SIGKILL by its KillBy when that is sooner than its limit's, and any
// other cancel leaves the limit's SIGKILL as it was.
func TestCancelKillComesByTheStopsDeadline(t *testing.T) {
	now := time.Now()
	limit, soon := now.Add(time.Hour), now.Add(time.Second)
	cancelled := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		child, stop := context.WithCancel(ctx) // the executor's is a child of the job's
		t.Cleanup(stop)
		return child
	}
	for _, c := range []struct {
		name  string
		ctx   context.Context
		limit time.Time
		want  time.Time
	}{
		{"a stop sooner than the limit", cancelled(&StopBy{Err: context.Canceled, KillBy: soon}), limit, soon},
		{"a stop with no limit", cancelled(&StopBy{Err: context.Canceled, KillBy: soon}), time.Time{}, soon},
		{"a stop later than the limit", cancelled(&StopBy{Err: context.Canceled, KillBy: limit}), soon, soon},
		{"a plain cancel", cancelled(context.Canceled), limit, limit},
	} {
		if got := CancelKill(c.ctx, c.limit); !got.Equal(c.want) {
			t.Errorf("%s: SIGKILL at %s, want %s", c.name, got.Sub(now), c.want.Sub(now))
		}
	}
}
