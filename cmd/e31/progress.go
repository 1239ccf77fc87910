package main

import (
	"io"
	"os"

	"github.com/schollz/progressbar/v3"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/stage"
)

// bar shows a transfer's progress on a terminal, a progressbar for each
// phase. Phases never overlap (stage.Progress), and a progressbar takes
// Adds from several goroutines at once: bar needs no lock of its own.
type bar struct {
	w  io.Writer
	pb *progressbar.ProgressBar
	// counts shows a count of things (an audit's messages and records)
	// rather than bytes, and leaves no line behind: the report follows
	// where the bar was.
	counts bool
}

// progressFor returns a progress bar on w when w is a terminal and quiet is
// false, else nil (no progress shown).
func progressFor(w io.Writer, quiet bool) stage.Progress {
	if terminal(w) && !quiet {
		return &bar{w: w}
	}
	return nil
}

// countsFor is progressFor for a count of things.
func countsFor(w io.Writer) audit.Progress {
	if terminal(w) {
		return &bar{w: w, counts: true}
	}
	return nil
}

// terminal reports whether w is a terminal, where a bar can be redrawn.
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (b *bar) Start(total int64, label string) {
	if total <= 0 {
		total = -1 // not known: a spinner
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(b.w),
		progressbar.OptionSetDescription(label),
		progressbar.OptionShowBytes(!b.counts),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100_000_000),
		progressbar.OptionShowCount(),
		progressbar.OptionClearOnFinish(),
	}
	if !b.counts {
		opts = append(opts, progressbar.OptionOnCompletion(func() { _, _ = io.WriteString(b.w, "\n") }))
	}
	b.pb = progressbar.NewOptions64(total, opts...)
}

func (b *bar) Add(n int64) { _ = b.pb.Add64(n) }

func (b *bar) Done() { _ = b.pb.Finish() }
