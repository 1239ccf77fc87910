//go:build linux

package container

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// syncBuffer is a writer RUN's copy can stand in for.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// With Spec.Stdout set, what the container writes goes there, all of it,
// before Run returns; a job that ignores SIGTERM is killed at its deadline.
func TestOutputGoesToTheSpecsWritersAndTheLimitKillsAtTheDeadline(t *testing.T) {
	t.Parallel()
	e := newExecutor(t)
	var out, errOut syncBuffer
	s := spec("c-logs", "honest")
	s.Stdout, s.Stderr = &out, &errOut
	r := run(t, context.Background(), e, s, nil)
	if r.res.Outcome != events.Succeeded || !strings.Contains(out.String(), "done=1\n") {
		t.Errorf("outcome %s, stdout %q: want succeeded, ending done=1", r.res.Outcome, out.String())
	}

	var out2, err2 syncBuffer
	s = spec("c-deadline", "stubborn")
	s.Stdout, s.Stderr = &out2, &err2
	s.Deadline = time.Now().Add(2 * time.Second)
	r = run(t, context.Background(), e, s, nil)
	if r.res.Outcome != events.LimitExceeded {
		t.Errorf("outcome %s, want limit_exceeded", r.res.Outcome)
	}
	if late := r.res.Stopped.Sub(s.Deadline); late > time.Second {
		t.Errorf("stopped %s after its deadline", late)
	}
}
