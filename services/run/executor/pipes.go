package executor

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Pipes carry a job's stdout and stderr to Spec.Stdout and Spec.Stderr.
// The job gets the write ends as its file descriptors 1 and 2, a goroutine
// copies each read end, and the node keeps no write end once the job has
// started: when the job's last process is gone the copies end.
type Pipes struct {
	// Stdout and Stderr are the write ends, for the job.
	Stdout, Stderr *os.File
	readers        [2]*os.File
	done           chan struct{}
}

// copyBufs are the buffers the copies read the job's output into, kept
// from one job to the next.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// OpenPipes starts copying into stdout and stderr.
func OpenPipes(stdout, stderr io.Writer) (*Pipes, error) {
	p := &Pipes{done: make(chan struct{}, 2)}
	for i, w := range []io.Writer{stdout, stderr} {
		r, wf, err := os.Pipe()
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("executor: pipe for the job's output: %w", err)
		}
		p.readers[i] = r
		if i == 0 {
			p.Stdout = wf
		} else {
			p.Stderr = wf
		}
		go func() {
			// A write error (none, for RUN's copy) must not stop the
			// reading: the job would block on a full pipe.
			buf := copyBufs.Get().(*[]byte)
			// Hidden behind a plain Reader: *os.File's WriteTo would
			// copy with a new 32 KiB buffer of its own, two per job.
			_, _ = io.CopyBuffer(w, struct{ io.Reader }{r}, *buf)
			copyBufs.Put(buf)
			_, _ = io.Copy(io.Discard, r)
			p.done <- struct{}{}
		}()
	}
	return p, nil
}

// Started closes the node's write ends: only the job holds them now.
func (p *Pipes) Started() {
	for _, f := range []*os.File{p.Stdout, p.Stderr} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// Wait waits, at most d, for both copies to reach the end of what the job
// wrote (once its processes are gone, and Started was called), then closes
// the read ends, so that a write end kept somewhere else cannot hold RUN.
func (p *Pipes) Wait(d time.Duration) {
	timeout := time.After(d)
	for n := 0; n < 2; n++ {
		select {
		case <-p.done:
		case <-timeout:
			n = 2
		}
	}
	p.Close()
}

// Close closes every end still open.
func (p *Pipes) Close() {
	for _, f := range []*os.File{p.Stdout, p.Stderr, p.readers[0], p.readers[1]} {
		if f != nil {
			_ = f.Close()
		}
	}
}
