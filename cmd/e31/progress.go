package main

import (
	"io"
	"os"

	"github.com/schollz/progressbar/v3"

	"github.com/e31net/e31/pkg/stage"
)

// bar shows a transfer's progress on a terminal, a progressbar for each
// phase. Phases never overlap (stage.Progress), and a progressbar takes
// Adds from several goroutines at once: bar needs no lock of its own.
type bar struct {
	w  io.Writer
	pb *progressbar.ProgressBar
}

// progressFor returns a progress bar on w when w is a terminal and quiet is
// false, else nil (no progress shown).
func progressFor(w io.Writer, quiet bool) stage.Progress {
	if f, ok := w.(*os.File); ok && !quiet {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return &bar{w: w}
		}
	}
	return nil
}

func (b *bar) Start(total int64, label string) {
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

func (b *bar) Add(n int64) { _ = b.pb.Add64(n) }

func (b *bar) Done() { _ = b.pb.Finish() }
