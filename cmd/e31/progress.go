package main

import (
	"io"
	"os"
	"sync"

	"github.com/schollz/progressbar/v3"

	"github.com/e31net/e31/pkg/stage"
)

// bar shows a transfer's progress on a terminal. Add may be called from
// several goroutines at once, as stage.Progress requires.
type bar struct {
	w  io.Writer
	mu sync.Mutex
	pb *progressbar.ProgressBar
}

// progressFor returns a progress bar on w when w is a terminal and quiet is
// false, else nil (no progress shown).
func progressFor(w io.Writer, quiet bool) stage.Progress {
	if quiet || !isTerminal(w) {
		return nil
	}
	return &bar{w: w}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (b *bar) Start(total int64, label string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pb = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(b.w),
		progressbar.OptionSetDescription(label),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100_000_000),
		progressbar.OptionShowCount(),
		progressbar.OptionOnCompletion(func() { _, _ = io.WriteString(b.w, "\n") }),
		progressbar.OptionClearOnFinish(),
	)
}

func (b *bar) Add(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pb != nil {
		_ = b.pb.Add64(n)
	}
}

func (b *bar) Done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pb != nil {
		_ = b.pb.Finish()
		b.pb = nil
	}
}
