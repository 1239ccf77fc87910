package stage_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

func readLog(t *testing.T, e *env, job string, stream string) (string, stage.LogIndex) {
	t.Helper()
	x, err := stage.ReadLogIndex(e.ctx, e.store, job, 1)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := stage.CopyLog(e.ctx, e.store, job, 1, x, stream, 0, &b); err != nil {
		t.Fatal(err)
	}
	return b.String(), x
}

func TestJobLogKeepsEverythingUnderItsCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := stage.NewJobLog(e.store, "small", 1, 1<<20)
	fmt.Fprint(l.Stdout(), "hello\n")
	fmt.Fprint(l.Stderr(), "oops\n")
	if err := l.Flush(e.ctx, false); err != nil {
		t.Fatal(err)
	}
	// A follower gets what is new, once.
	if got := l.Recent(); len(got) != 2 || string(got[0].Bytes) != "hello\n" || got[1].Stream != stage.Stderr || string(got[1].Bytes) != "oops\n" {
		t.Errorf("Recent = %+v, want hello on stdout and oops on stderr", got)
	}
	fmt.Fprint(l.Stdout(), "bye\n")
	if got := l.Recent(); len(got) != 1 || string(got[0].Bytes) != "bye\n" || got[0].Offset != 6 {
		t.Errorf("Recent = %+v, want bye at offset 6", got)
	}
	if _, err := stage.ReadLogIndex(e.ctx, e.store, "small", 1); !errors.Is(err, stage.ErrNotFound) {
		t.Errorf("an index before the job stopped: %v", err)
	}
	if err := l.Flush(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	// A final flush tried again changes nothing.
	if err := l.Flush(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	out, x := readLog(t, e, "small", stage.Stdout)
	errOut, _ := readLog(t, e, "small", stage.Stderr)
	if out != "hello\nbye\n" || errOut != "oops\n" || !x.Done || x.Stdout.Truncated() {
		t.Errorf("stdout %q, stderr %q, done %v, truncated %v", out, errOut, x.Done, x.Stdout.Truncated())
	}
	if o, e, tr := l.Counts(); o != 10 || e != 5 || tr {
		t.Errorf("counts %d %d %v, want 10 5 false", o, e, tr)
	}
}

// A stream past its cap keeps its head and its tail, with a line where
// the middle was, and the last line written is there.
func TestJobLogPastItsCapKeepsHeadAndTail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const limit = 4 << 20 // tail 1 MiB, head 3 MiB
	l := stage.NewJobLog(e.store, "chatty", 1, limit)
	var all strings.Builder
	for i := 0; all.Len() < 12<<20; i++ {
		line := fmt.Sprintf("line %08d %s\n", i, strings.Repeat("x", 100))
		all.WriteString(line)
		mustWrite(t, l.Stdout(), []byte(line))
		if i%20000 == 0 {
			if err := l.Flush(e.ctx, false); err != nil {
				t.Fatal(err)
			}
			// While it runs, the head's full chunks are readable.
			if i > 0 {
				head, err := stage.ReadLogHead(e.ctx, e.store, "chatty", 1, stage.Stdout, 0)
				if err != nil || len(head) == 0 || !strings.HasPrefix(all.String(), string(head[0].Bytes)) {
					t.Fatalf("the head so far: %d pieces, %v", len(head), err)
				}
			}
			if r := l.Recent(); len(r) != 1 || len(r[0].Bytes) > stage.RecentMax || r[0].Offset+int64(len(r[0].Bytes)) != int64(all.Len()) {
				t.Fatalf("Recent does not end at what was written: %d pieces", len(r))
			}
		}
	}
	mustWrite(t, l.Stdout(), []byte("the last words\n"))
	all.WriteString("the last words\n")
	if err := l.Flush(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	got, x := readLog(t, e, "chatty", stage.Stdout)
	want := all.String()
	head, tail := want[:limit-stage.LogTail], want[len(want)-stage.LogTail:]
	if !strings.HasPrefix(got, head) {
		t.Errorf("the head (first %d bytes) is not kept", len(head))
	}
	if !strings.HasSuffix(got, tail) || !strings.HasSuffix(got, "the last words\n") {
		t.Errorf("the tail (last %d bytes) is not kept: ends %q", len(tail), got[max(len(got)-40, 0):])
	}
	gap := fmt.Sprintf("\n[e31: %d bytes of stdout not kept]\n", len(want)-len(head)-len(tail))
	if got != head+gap+tail {
		t.Errorf("kept %d bytes, want head %d + a line + tail %d", len(got), len(head), len(tail))
	}
	if !x.Stdout.Truncated() || x.Stdout.Bytes != int64(len(want)) {
		t.Errorf("index says %d bytes, truncated %v; want %d, true", x.Stdout.Bytes, x.Stdout.Truncated(), len(want))
	}
	// Nothing is stored that the index does not list.
	n := 0
	for _, name := range e.objects(t) {
		if strings.HasPrefix(name, "log/chatty/1/stdout/") {
			n++
		}
	}
	if n != len(x.Stdout.Chunks) {
		t.Errorf("%d stdout objects stored, the index lists %d", n, len(x.Stdout.Chunks))
	}
	if _, _, tr := l.Counts(); !tr {
		t.Error("Counts does not say truncated")
	}
}

// DeleteLog removes every object of one attempt's log, with or without its
// index (a node that died while the job ran leaves the head's chunks and
// no index), and nothing of another attempt's.
func TestDeleteLogRemovesHeadTailAndIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	big := bytes.Repeat([]byte("0123456789abcdef\n"), (2<<20)/17)
	done := stage.NewJobLog(e.store, "gone", 1, 1<<20)
	mustWrite(t, done.Stdout(), big)
	mustWrite(t, done.Stderr(), []byte("last words\n"))
	if err := done.Flush(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	died := stage.NewJobLog(e.store, "gone", 2, 4<<20)
	mustWrite(t, died.Stdout(), big[:600<<10])
	if err := died.Flush(e.ctx, false); err != nil {
		t.Fatal(err)
	}
	kept := stage.NewJobLog(e.store, "kept", 1, 1<<20)
	mustWrite(t, kept.Stdout(), []byte("still here\n"))
	if err := kept.Flush(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	x, err := stage.ReadLogIndex(e.ctx, e.store, "gone", 1)
	if err != nil || !x.Stdout.Truncated() || len(x.Stdout.Chunks) < 2 {
		t.Fatalf("before: index %+v, %v; want a truncated stdout in head and tail chunks", x, err)
	}
	if head, err := stage.ReadLogHead(e.ctx, e.store, "gone", 2, stage.Stdout, 0); err != nil || len(head) != 2 {
		t.Fatalf("before: %d head chunks of the attempt that died, %v; want 2", len(head), err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		if err := stage.DeleteLog(e.ctx, e.store, "gone", attempt); err != nil {
			t.Fatal(err)
		}
		// Again: nothing left to delete is no error.
		if err := stage.DeleteLog(e.ctx, e.store, "gone", attempt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stage.ReadLogIndex(e.ctx, e.store, "gone", 1); !errors.Is(err, stage.ErrNotFound) {
		t.Errorf("the index after DeleteLog: %v", err)
	}
	for _, s := range []string{stage.Stdout, stage.Stderr} {
		for _, c := range x.Stream(s).Chunks {
			if _, err := stage.ReadLogChunk(e.ctx, e.store, "gone", 1, s, c); !errors.Is(err, stage.ErrNotFound) {
				t.Errorf("%s chunk at %d after DeleteLog: %v", s, c.Offset, err)
			}
		}
	}
	if head, err := stage.ReadLogHead(e.ctx, e.store, "gone", 2, stage.Stdout, 0); err != nil || len(head) != 0 {
		t.Errorf("after: %d head chunks of the attempt that died, %v", len(head), err)
	}
	if out, _ := readLog(t, e, "kept", stage.Stdout); out != "still here\n" {
		t.Errorf("another job's log: %q", out)
	}
}

// A job that wrote nothing stores no log, and its stop's logs (0 and 0
// bytes) make it read as empty and complete; a stop that says nothing, or
// says bytes were written, still finds nothing stored.
func TestJobLogOfNothingStoresNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	l := stage.NewJobLog(e.store, "quiet", 1, 1<<20)
	if err := l.Flush(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := stage.ReadLogIndex(e.ctx, e.store, "quiet", 1); !errors.Is(err, stage.ErrNotFound) {
		t.Fatalf("an empty log stored an index: %v", err)
	}
	x, err := stage.ReadLogIndexOf(e.ctx, e.store, "quiet", 1, &events.Logs{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, s := range []string{stage.Stdout, stage.Stderr} {
		if _, err := stage.CopyLog(e.ctx, e.store, "quiet", 1, x, s, 0, &b); err != nil {
			t.Fatal(err)
		}
	}
	if !x.Done || b.Len() != 0 || x.Stdout.Truncated() || x.Stderr.Truncated() {
		t.Errorf("empty log read as done %v, %q, truncated %v %v", x.Done, b.String(), x.Stdout.Truncated(), x.Stderr.Truncated())
	}
	for _, logs := range []*events.Logs{nil, {StderrBytes: 5}, {Truncated: true}} {
		if _, err := stage.ReadLogIndexOf(e.ctx, e.store, "quiet", 1, logs); !errors.Is(err, stage.ErrNotFound) {
			t.Errorf("logs %+v: a log that is not stored read as %v, want ErrNotFound", logs, err)
		}
	}
	// The same log with a byte in it is stored as before.
	one := stage.NewJobLog(e.store, "one", 1, 1<<20)
	fmt.Fprint(one.Stderr(), "x")
	if err := one.Flush(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := readLog(t, e, "one", stage.Stderr); got != "x" {
		t.Errorf("stderr %q, want x", got)
	}
}

// mustWrite writes b to a job's log as the job would, failing the test if
// the log refuses it.
func mustWrite(t testing.TB, w io.Writer, b []byte) {
	t.Helper()
	if _, err := w.Write(b); err != nil {
		t.Fatalf("write to the job's log: %v", err)
	}
}
