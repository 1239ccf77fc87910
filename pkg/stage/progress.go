package stage

import (
	"context"
	"io"
)

// Progress is told how a transfer advances; the CLI wraps a progress bar
// around it. A nil Progress means none.
//
// A transfer may run several phases one after the other (Upload hashes, then
// sends), each one Start, any number of Add and one Done; phases never
// overlap. Add may be called from several goroutines at once, because files
// move in parallel.
type Progress interface {
	// Start begins a phase that will move total bytes.
	Start(total int64, label string)
	// Add reports n more bytes done, sent or found already stored.
	Add(n int64)
	// Done ends the phase, whether it succeeded or not.
	Done()
}

type noProgress struct{}

func (noProgress) Start(int64, string) {}
func (noProgress) Add(int64)           {}
func (noProgress) Done()               {}

func orNone(p Progress) Progress {
	if p == nil {
		return noProgress{}
	}
	return p
}

// progressWriter reports every write to p.
type progressWriter struct{ p Progress }

func (w progressWriter) Write(b []byte) (int, error) {
	w.p.Add(int64(len(b)))
	return len(b), nil
}

// progressReader reports every read to p.
type progressReader struct {
	r io.Reader
	p Progress
}

func (r progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if n > 0 {
		r.p.Add(int64(n))
	}
	return n, err
}

// ctxReader stops reading once ctx ends, so that a long hash or copy of a
// local file can be cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(b)
}
