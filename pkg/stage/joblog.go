package stage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/e31net/e31/pkg/events"
)

// A job's log is what one attempt wrote to its stdout and stderr, kept in
// its submitter's store beside its output, under names of its own (not
// content addressed: the log grows while the job runs):
//
//	log/<job>/<attempt>/index             LogIndex, JSON: what is stored so far
//	log/<job>/<attempt>/<stream>/<offset> the stream's bytes from offset on
//
// A stream is bounded: of what the job writes past the cap, only the head
// (everything up to cap minus the tail) and the tail (the last LogTail
// bytes, or a quarter of the cap if smaller) are kept, as CI systems do,
// so the last line a job printed before it died is always there. A gap
// between two chunks is what was not kept.
//
// RUN writes it with a JobLog, which flushes while the job runs (so that
// the submitter can follow it) and once more, marked done, when it stops;
// the CLI reads it with ReadLogIndexOf and ReadLogChunk. A job that wrote
// nothing stores no log at all: its RunStopped says 0 and 0 bytes.

// The streams of a job's log.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// LogTail is the most of a stream's tail a JobLog keeps.
const LogTail = 1 << 20

// logChunkSize is the size of the head's pieces: the most a flush rewrites
// of the head, and the most of it the node holds before storing it.
const logChunkSize = 256 << 10

// LogIndex says what is stored of one attempt's log.
type LogIndex struct {
	Version int `json:"version"`
	// Done is set once the job has stopped: nothing more will come.
	Done   bool      `json:"done"`
	Stdout LogStream `json:"stdout"`
	Stderr LogStream `json:"stderr"`
}

// LogStream is what is stored of one stream.
type LogStream struct {
	// Bytes is how many bytes the job wrote to it.
	Bytes int64 `json:"bytes"`
	// Chunks are the stored pieces, in order; bytes between two of them,
	// or after the last, were not kept.
	Chunks []LogChunk `json:"chunks"`
}

// LogChunk is one stored piece of a stream: Size bytes from Offset on.
type LogChunk struct {
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// Truncated reports whether bytes the job wrote are not stored.
func (s LogStream) Truncated() bool {
	var kept int64
	for _, c := range s.Chunks {
		kept += c.Size
	}
	return kept < s.Bytes
}

// Stream returns the index's stream called name (Stdout or Stderr).
func (x *LogIndex) Stream(name string) *LogStream {
	if name == Stderr {
		return &x.Stderr
	}
	return &x.Stdout
}

func logPrefix(job string, attempt int) string { return fmt.Sprintf("log/%s/%d/", job, attempt) }

func logChunkName(job string, attempt int, stream string, offset int64) string {
	return fmt.Sprintf("%s%s/%016d", logPrefix(job, attempt), stream, offset)
}

// ReadLogIndex returns the index of one attempt's log; it fails with
// ErrNotFound while nothing is stored.
func ReadLogIndex(ctx context.Context, store Store, job string, attempt int) (LogIndex, error) {
	var x LogIndex
	b, err := readAll(ctx, store, logPrefix(job, attempt)+"index")
	if err != nil {
		return x, err
	}
	if err := json.Unmarshal(b, &x); err != nil {
		return x, fmt.Errorf("log index of %s attempt %d: %w: %v", job, attempt, ErrBadManifest, err)
	}
	return x, nil
}

// ReadLogIndexOf is ReadLogIndex for an attempt whose stop says how much it
// wrote (RunStopped's logs, the hold record's attempt's Logs; nil if it did
// not stop on its node): a log the stop says is empty has no index, since
// nothing of it is stored, and is returned as an empty, complete one.
func ReadLogIndexOf(ctx context.Context, store Store, job string, attempt int, logs *events.Logs) (LogIndex, error) {
	x, err := ReadLogIndex(ctx, store, job, attempt)
	if errors.Is(err, ErrNotFound) && EmptyLog(logs) {
		return LogIndex{Version: 1, Done: true, Stdout: LogStream{Chunks: []LogChunk{}}, Stderr: LogStream{Chunks: []LogChunk{}}}, nil
	}
	return x, err
}

// EmptyLog reports whether a stop's logs say the attempt wrote nothing.
func EmptyLog(logs *events.Logs) bool {
	return logs != nil && logs.StdoutBytes == 0 && logs.StderrBytes == 0 && !logs.Truncated
}

// ReadLogChunk returns the bytes of one chunk an index lists. It fails
// with ErrNotFound if the chunk was replaced since (the tail moves while
// the job runs): read the index again.
func ReadLogChunk(ctx context.Context, store Store, job string, attempt int, stream string, c LogChunk) ([]byte, error) {
	b, err := readAll(ctx, store, logChunkName(job, attempt, stream, c.Offset))
	if err != nil {
		return nil, err
	}
	// The head's last chunk grows under its name: what the index listed
	// is its beginning.
	if int64(len(b)) < c.Size {
		return nil, fmt.Errorf("log chunk %d of %s: %d bytes, index says %d: %w", c.Offset, stream, len(b), c.Size, ErrNotFound)
	}
	return b[:c.Size], nil
}

func readAll(ctx context.Context, store Store, name string) ([]byte, error) {
	r, err := store.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// JobLog keeps what a job writes to its stdout and stderr, bounded, and
// stores it in the submitter's store. Stdout and Stderr are the writers
// the job's output is copied into; they only copy into memory, so that a
// job never waits on the store. Writes, Flush and Recent may happen
// concurrently.
//
// Every object is written once: the head's chunks as they fill, and the
// head's last chunk, the tail and the index when the job has stopped. (A
// node may not purge a bucket's stream, which replacing or deleting an
// object takes; nor need it, this way.) Until then, Recent gives what is
// new, for a follower.
type JobLog struct {
	store   Store
	job     string
	attempt int

	flushing sync.Mutex // one flush at a time
	mu       sync.Mutex
	streams  [2]*logStream
}

// NewJobLog returns the log of one attempt of job, keeping at most limit
// bytes of each stream (head and tail).
func NewJobLog(store Store, job string, attempt int, limit int64) *JobLog {
	tail := min(int64(LogTail), max(limit/4, 1))
	head := max(limit-tail, 0)
	l := &JobLog{store: store, job: job, attempt: attempt}
	for i, name := range []string{Stdout, Stderr} {
		l.streams[i] = &logStream{l: l, name: name, headCap: head, tailCap: tail}
	}
	return l
}

// Stdout is the writer of the job's stdout.
func (l *JobLog) Stdout() io.Writer { return l.streams[0] }

// Stderr is the writer of the job's stderr.
func (l *JobLog) Stderr() io.Writer { return l.streams[1] }

// Counts returns how many bytes the job wrote to stdout and stderr, and
// whether any of them are not kept.
func (l *JobLog) Counts() (stdout, stderr int64, truncated bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, e := l.streams[0], l.streams[1]
	return o.total, e.total, o.total > o.headCap+o.tailCap || e.total > e.headCap+e.tailCap
}

// LogPiece is some of what a job wrote to one stream: Bytes from Offset on.
type LogPiece struct {
	Stream string
	Offset int64
	Bytes  []byte
}

// The headers of a message that carries a LogPiece live (the body is its
// bytes): which stream, and the offset of its first byte.
const (
	LogStreamHeader = "E31-Log-Stream"
	LogOffsetHeader = "E31-Log-Offset"
)

// RecentMax is the most of each stream one call of Recent returns: a
// follower of a job that writes faster sees the newest bytes, and a line
// that says what it skipped.
const RecentMax = 64 << 10

// Recent returns what the job wrote since the last call, the newest
// RecentMax bytes of each stream at most.
func (l *JobLog) Recent() []LogPiece {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []LogPiece
	for _, s := range l.streams {
		n := min(s.total-s.sent, s.recentLen)
		if n == 0 {
			continue
		}
		b := make([]byte, 0, n)
		start := (s.recentPos - n + RecentMax) % RecentMax
		if start+n > RecentMax {
			b = append(b, s.recent[start:]...)
			b = append(b, s.recent[:s.recentPos]...)
		} else {
			b = append(b, s.recent[start:start+n]...)
		}
		out = append(out, LogPiece{Stream: s.name, Offset: s.total - n, Bytes: b})
		s.sent = s.total
	}
	return out
}

// logStream is one stream of a JobLog. Its bytes from 0 to headCap are the
// head, stored in chunks of logChunkSize; past headCap only the last
// tailCap bytes are kept, in a ring, stored when the job stops. recent
// holds the last RecentMax bytes, whatever part they are of, for Recent.
type logStream struct {
	l                *JobLog
	name             string
	headCap, tailCap int64
	total            int64

	sealed  []pending  // full head chunks not yet stored
	open    []byte     // the head's last, growing chunk, from openOff
	openOff int64      // where open starts
	stored  []LogChunk // head chunks stored

	ring    []byte // the tail, circular; ring[ringPos] is the oldest byte once full
	ringLen int64
	ringPos int64

	recent    []byte
	recentLen int64
	recentPos int64
	sent      int64 // what Recent has returned up to
}

type pending struct {
	off int64
	b   []byte
}

// Write keeps p: in the head while there is room, else in the tail.
func (s *logStream) Write(p []byte) (int, error) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	n := len(p)
	if s.recent == nil {
		s.recent = make([]byte, RecentMax)
	}
	s.recentPos, s.recentLen = ringWrite(s.recent, s.recentPos, s.recentLen, p)
	for len(p) > 0 && s.total < s.headCap {
		k := min(int64(len(p)), s.headCap-s.total, logChunkSize-int64(len(s.open)))
		s.open = append(s.open, p[:k]...)
		s.total += k
		p = p[k:]
		if len(s.open) == logChunkSize || s.total == s.headCap {
			s.sealed = append(s.sealed, pending{off: s.openOff, b: s.open})
			s.open, s.openOff = nil, s.total
		}
	}
	if len(p) > 0 {
		if s.ring == nil {
			s.ring = make([]byte, s.tailCap)
		}
		s.total += int64(len(p))
		s.ringPos, s.ringLen = ringWrite(s.ring, s.ringPos, s.ringLen, p)
	}
	return n, nil
}

// ringWrite writes p into the ring buffer r, whose next byte goes at pos
// and which holds n bytes, keeping the last len(r) bytes; it returns the
// new pos and n.
func ringWrite(r []byte, pos, n int64, p []byte) (int64, int64) {
	size := int64(len(r))
	if int64(len(p)) > size {
		p = p[int64(len(p))-size:]
	}
	for len(p) > 0 {
		k := copy(r[pos:], p)
		p = p[k:]
		pos = (pos + int64(k)) % size
		n = min(n+int64(k), size)
	}
	return pos, n
}

// tail returns the ring's bytes in order and the offset of the first.
func (s *logStream) tail() ([]byte, int64) {
	out := make([]byte, 0, s.ringLen)
	if s.ringLen == s.tailCap {
		out = append(out, s.ring[s.ringPos:]...)
	}
	out = append(out, s.ring[:s.ringPos]...)
	return out, s.total - s.ringLen
}

// Flush stores the head's chunks that are full; with done, once the job
// has stopped, also the rest (the head's last chunk and the tail) and the
// index that says the log is complete. What could not be stored is kept
// for the next flush: a failed final flush may be tried again.
func (l *JobLog) Flush(ctx context.Context, done bool) error {
	l.flushing.Lock()
	defer l.flushing.Unlock()
	var errs []error
	for _, s := range l.streams {
		if err := s.flush(ctx, done); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("log of %s attempt %d: %w", l.job, l.attempt, err)
	}
	if !done {
		return nil
	}
	l.mu.Lock()
	if l.streams[0].total == 0 && l.streams[1].total == 0 {
		// A job that wrote nothing (most trivial jobs) stores nothing:
		// its stop's logs, 0 and 0 bytes, say the log is empty and
		// complete (ReadLogIndexOf), and an index here would cost the
		// node a read and two durable writes per job.
		l.mu.Unlock()
		return nil
	}
	x := LogIndex{Version: 1, Done: true}
	for _, s := range l.streams {
		st := x.Stream(s.name)
		st.Bytes = s.total
		st.Chunks = append([]LogChunk{}, s.stored...)
	}
	l.mu.Unlock()
	b, err := json.Marshal(x)
	if err != nil {
		return err
	}
	if err := putOnce(ctx, l.store, logPrefix(l.job, l.attempt)+"index", b); err != nil {
		return fmt.Errorf("log of %s attempt %d: %w", l.job, l.attempt, err)
	}
	return nil
}

// flush stores the stream's full chunks, and with done the rest. It runs
// under JobLog.flushing, taking mu only to look and to record.
func (s *logStream) flush(ctx context.Context, done bool) error {
	l := s.l
	l.mu.Lock()
	todo := s.sealed
	s.sealed = nil
	if done {
		if len(s.open) > 0 {
			todo = append(todo, pending{off: s.openOff, b: s.open})
			s.open, s.openOff = nil, s.total
		}
		if s.ringLen > 0 {
			b, off := s.tail()
			todo = append(todo, pending{off: off, b: b})
			s.ringLen, s.ringPos = 0, 0
		}
	}
	l.mu.Unlock()
	for i, p := range todo {
		name := logChunkName(l.job, l.attempt, s.name, p.off)
		if err := putOnce(ctx, l.store, name, p.b); err != nil {
			l.mu.Lock()
			s.sealed = append(todo[i:], s.sealed...)
			l.mu.Unlock()
			return err
		}
		sum := sha256.Sum256(p.b)
		l.mu.Lock()
		s.stored = append(s.stored, LogChunk{Offset: p.off, Size: int64(len(p.b)), Digest: digestPrefix + hex.EncodeToString(sum[:])})
		l.mu.Unlock()
	}
	return nil
}

// putOnce stores b under name unless it is there already, as a flush that
// failed half way and is tried again may find it.
func putOnce(ctx context.Context, store Store, name string, b []byte) error {
	sum := sha256.Sum256(b)
	digest := digestPrefix + hex.EncodeToString(sum[:])
	if info, err := store.Stat(ctx, name); err == nil && info.Digest == digest {
		return nil
	}
	return store.Put(ctx, name, digest, int64(len(b)), bytes.NewReader(b))
}

// ReadLogHead returns the head's chunks stored so far of a job that runs
// (its log has no index yet), from offset from on: the chunk that holds
// from and every one after it, in order.
func ReadLogHead(ctx context.Context, store Store, job string, attempt int, stream string, from int64) ([]LogPiece, error) {
	var out []LogPiece
	for off := from / logChunkSize * logChunkSize; ; off += logChunkSize {
		b, err := readAll(ctx, store, logChunkName(job, attempt, stream, off))
		if errors.Is(err, ErrNotFound) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, LogPiece{Stream: stream, Offset: off, Bytes: b})
		if len(b) < logChunkSize {
			return out, nil
		}
	}
}

// CopyLog writes to w what x lists of one stream from offset from on, with
// a line that says so where bytes were not kept, and returns the offset
// it reached. A chunk replaced since x was read (the tail moved) ends it
// early with an error wrapping ErrNotFound: read the index again and go
// on from the offset returned.
func CopyLog(ctx context.Context, store Store, job string, attempt int, x LogIndex, stream string, from int64, w io.Writer) (int64, error) {
	for _, c := range x.Stream(stream).Chunks {
		end := c.Offset + c.Size
		if end <= from {
			continue
		}
		b, err := ReadLogChunk(ctx, store, job, attempt, stream, c)
		if err != nil {
			return from, err
		}
		if c.Offset > from {
			if _, err := fmt.Fprintf(w, "\n[e31: %d bytes of %s not kept]\n", c.Offset-from, stream); err != nil {
				return from, err
			}
			from = c.Offset
		}
		if _, err := w.Write(b[from-c.Offset:]); err != nil {
			return from, err
		}
		from = end
	}
	return from, nil
}

// DeleteLog removes what is stored of one attempt's log: every chunk its
// index lists, every chunk of the head stored before it (a node that died
// while the job ran leaves those and no index), then the index, last, so
// that a deletion that fails half way and is tried again finds what is
// left. Deleting a log that is not there is not an error.
func DeleteLog(ctx context.Context, store Store, job string, attempt int) error {
	var names []string
	x, err := ReadLogIndex(ctx, store, job, attempt)
	switch {
	case err == nil:
		for _, stream := range []string{Stdout, Stderr} {
			for _, c := range x.Stream(stream).Chunks {
				names = append(names, logChunkName(job, attempt, stream, c.Offset))
			}
		}
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrBadManifest), errors.Is(err, ErrCorrupt):
		// No index to go by (or none to trust): the head's chunks are
		// found by their names.
		for _, stream := range []string{Stdout, Stderr} {
			for off := int64(0); ; off += logChunkSize {
				name := logChunkName(job, attempt, stream, off)
				info, err := store.Stat(ctx, name)
				if errors.Is(err, ErrNotFound) {
					break
				}
				if err != nil {
					return fmt.Errorf("delete log of %s attempt %d: %w", job, attempt, err)
				}
				names = append(names, name)
				if info.Size < logChunkSize {
					break
				}
			}
		}
	default:
		return fmt.Errorf("delete log of %s attempt %d: %w", job, attempt, err)
	}
	if err := DeleteObjects(ctx, store, names); err != nil {
		return fmt.Errorf("delete log of %s attempt %d: %w", job, attempt, err)
	}
	if err := store.Delete(ctx, logPrefix(job, attempt)+"index"); err != nil {
		return fmt.Errorf("delete log of %s attempt %d: %w", job, attempt, err)
	}
	return nil
}
