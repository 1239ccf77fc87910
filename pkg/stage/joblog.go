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
// the CLI reads it with ReadLogIndex and ReadLogChunk.

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
// job never waits on the store. Flush stores what is new. Writes and
// flushes may happen concurrently.
type JobLog struct {
	store   Store
	job     string
	attempt int

	flushing sync.Mutex // one flush at a time
	indexed  [2]int64   // the totals the stored index has; under flushing
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

// logStream is one stream of a JobLog. Its bytes from 0 to headCap are the
// head, stored in chunks of logChunkSize; past headCap only the last
// tailCap bytes are kept, in a ring, and stored as one chunk that moves.
type logStream struct {
	l                *JobLog
	name             string
	headCap, tailCap int64
	total            int64

	sealed  []pending  // full head chunks not yet stored
	open    []byte     // the head's last, growing chunk, from openOff
	openOff int64      // where open starts
	openNew bool       // open changed since it was stored
	stored  []LogChunk // head chunks stored
	openRef *LogChunk  // open as last stored

	ring     []byte // the tail, circular; ring[ringPos] is the oldest byte once full
	ringLen  int64
	ringPos  int64
	ringNew  bool
	tailName string // the stored tail, to delete when it moves
	tailRef  *LogChunk
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
	for len(p) > 0 && s.total < s.headCap {
		k := min(int64(len(p)), s.headCap-s.total, logChunkSize-int64(len(s.open)))
		s.open = append(s.open, p[:k]...)
		s.openNew = true
		s.total += k
		p = p[k:]
		if len(s.open) == logChunkSize || s.total == s.headCap {
			s.sealed = append(s.sealed, pending{off: s.openOff, b: s.open})
			s.open, s.openOff, s.openNew, s.openRef = nil, s.total, false, nil
		}
	}
	if len(p) > 0 {
		if s.ring == nil {
			s.ring = make([]byte, s.tailCap)
		}
		s.total += int64(len(p))
		if int64(len(p)) > s.tailCap {
			p = p[int64(len(p))-s.tailCap:]
		}
		for len(p) > 0 {
			k := copy(s.ring[s.ringPos:], p)
			p = p[k:]
			s.ringPos = (s.ringPos + int64(k)) % s.tailCap
			s.ringLen = min(s.ringLen+int64(k), s.tailCap)
		}
		s.ringNew = true
	}
	return n, nil
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

// Flush stores what the job wrote since the last flush, then the index;
// with done, the index says the log is complete. What could not be stored
// is kept for the next flush.
func (l *JobLog) Flush(ctx context.Context, done bool) error {
	l.flushing.Lock()
	defer l.flushing.Unlock()
	l.mu.Lock()
	idle := l.indexed == [2]int64{l.streams[0].total, l.streams[1].total}
	l.mu.Unlock()
	if idle && !done {
		// Nothing new: a job that is quiet costs the store nothing.
		return nil
	}
	var errs []error
	for _, s := range l.streams {
		if err := s.flush(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("log of %s attempt %d: %w", l.job, l.attempt, err)
	}
	l.mu.Lock()
	x := LogIndex{Version: 1, Done: done}
	totals := [2]int64{l.streams[0].total, l.streams[1].total}
	for _, s := range l.streams {
		st := x.Stream(s.name)
		st.Bytes = s.total
		st.Chunks = append([]LogChunk{}, s.stored...)
		if s.openRef != nil {
			st.Chunks = append(st.Chunks, *s.openRef)
		}
		if s.tailRef != nil {
			st.Chunks = append(st.Chunks, *s.tailRef)
		}
	}
	l.mu.Unlock()
	b, err := json.Marshal(x)
	if err != nil {
		return err
	}
	if err := putBytes(ctx, l.store, logPrefix(l.job, l.attempt)+"index", b); err != nil {
		return fmt.Errorf("log of %s attempt %d: %w", l.job, l.attempt, err)
	}
	l.indexed = totals
	return nil
}

// flush stores the stream's new bytes. It runs under JobLog.flushing,
// taking mu only to look and to record.
func (s *logStream) flush(ctx context.Context) error {
	l := s.l
	l.mu.Lock()
	sealed := s.sealed
	s.sealed = nil
	var open []byte
	openOff := s.openOff
	if s.openNew {
		open = bytes.Clone(s.open)
		s.openNew = false
	}
	var tail []byte
	var tailOff int64
	if s.ringNew {
		tail, tailOff = s.tail()
		s.ringNew = false
	}
	l.mu.Unlock()

	for i, p := range sealed {
		ref, err := putChunk(ctx, l, s.name, p.off, p.b)
		if err != nil {
			l.mu.Lock()
			s.sealed = append(sealed[i:], s.sealed...)
			if open != nil {
				s.openNew = true
			}
			if tail != nil {
				s.ringNew = true
			}
			l.mu.Unlock()
			return err
		}
		l.mu.Lock()
		s.stored = append(s.stored, ref)
		l.mu.Unlock()
	}
	if open != nil {
		ref, err := putChunk(ctx, l, s.name, openOff, open)
		l.mu.Lock()
		switch {
		case err != nil:
			s.openNew = true
		case s.openOff == openOff: // not sealed meanwhile
			s.openRef = &ref
		}
		l.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if tail != nil {
		ref, err := putChunk(ctx, l, s.name, tailOff, tail)
		if err != nil {
			l.mu.Lock()
			s.ringNew = true
			l.mu.Unlock()
			return err
		}
		name := logChunkName(l.job, l.attempt, s.name, tailOff)
		l.mu.Lock()
		old := s.tailName
		s.tailName, s.tailRef = name, &ref
		l.mu.Unlock()
		if old != "" && old != name {
			// A reader that still has the old index reads it again.
			_ = l.store.Delete(ctx, old)
		}
	}
	return nil
}

func putChunk(ctx context.Context, l *JobLog, stream string, off int64, b []byte) (LogChunk, error) {
	name := logChunkName(l.job, l.attempt, stream, off)
	if err := putBytes(ctx, l.store, name, b); err != nil {
		return LogChunk{}, err
	}
	sum := sha256.Sum256(b)
	return LogChunk{Offset: off, Size: int64(len(b)), Digest: digestPrefix + hex.EncodeToString(sum[:])}, nil
}

func putBytes(ctx context.Context, store Store, name string, b []byte) error {
	sum := sha256.Sum256(b)
	return store.Put(ctx, name, digestPrefix+hex.EncodeToString(sum[:]), int64(len(b)), bytes.NewReader(b))
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
