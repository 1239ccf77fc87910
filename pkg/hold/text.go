package hold

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// The record for people and for spreadsheets: `e31 wait`, `e31 ledger`
// and their --csv. The JSON form is the record itself.

// HumanBytes writes a size for people: 512 B, 1.5 KiB, 2 GiB (a whole
// number without ".0", as a job file writes it).
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	s := strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " " + string("KMGTPE"[exp]) + "iB"
}

// stickyWriter remembers the first error of its writes, so that a page
// of Fprintf calls checks once.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) printf(format string, args ...any) {
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.w, format, args...)
	}
}

// WriteText writes r for people, a line per aspect: who, how it ended,
// what it asked for, each attempt's hold, the meter, the output, the logs.
func WriteText(w io.Writer, r *HoldRecord) error {
	p := &stickyWriter{w: w}
	title := r.Job
	if r.Name != "" {
		title += "  " + r.Name
	}
	p.printf("job      %s  (submitted by %s)\n", title, r.Submitter)
	outcome := r.State
	if r.Outcome != "" {
		outcome = string(r.Outcome)
	}
	if r.ExitCode != nil {
		outcome += fmt.Sprintf(" (exit %d)", *r.ExitCode)
	}
	if r.Reason != "" && r.Outcome != events.Succeeded {
		outcome += ": " + r.Reason
	}
	p.printf("outcome  %s\n", outcome)
	q := r.Request
	p.printf("request  %g cpu, %s memory, limit %s\n", q.CPU, HumanBytes(q.MemoryBytes), (time.Duration(q.LimitSeconds * float64(time.Second))).String())
	for _, a := range r.Attempts {
		line := fmt.Sprintf("held     attempt %d on %s", a.Attempt, a.Node)
		if a.HeldAt != nil {
			line += " from " + a.HeldAt.Format(time.RFC3339)
		}
		if a.ReleasedAt != nil {
			line += fmt.Sprintf(" for %.3f s", a.HeldSeconds)
		}
		if a.Outcome != "" && len(r.Attempts) > 1 {
			line += " → " + string(a.Outcome)
		}
		if len(a.Held.GPUs) > 0 {
			line += "; GPUs " + strings.Join(a.Held.GPUs, ", ")
		}
		if a.ResumedFrom != "" {
			line += "; resumed from save " + a.ResumedFrom
		}
		if c := a.Checkpoints; c != nil {
			line += fmt.Sprintf("; %d checkpoint save(s), the last %s of %s", c.Saves, c.Last, HumanBytes(c.Bytes))
		}
		p.printf("%s\n", line)
	}
	if len(r.Attempts) > 0 {
		p.printf("meter    %.3f s held: %.3f cpu-core-s, %.3f memory-GiB-s, %.3f gpu-s\n",
			r.HeldSeconds, r.CPUCoreSeconds, r.MemoryGiBSeconds, r.GPUSeconds)
		if r.LostSeconds > 0 {
			p.printf("lost     %.3f s of it held by attempts lost with their node: not billed\n", r.LostSeconds)
		}
		p.printf("usage    %.3f cpu-seconds, %s peak memory\n", r.Usage.CPUSeconds, HumanBytes(r.Usage.MaxRSSBytes))
		for _, g := range r.Usage.GPUs {
			p.printf("usage    %s: %.1f%% utilised, %s peak device memory (%d samples)\n", g.UUID, g.UtilizationPercent, HumanBytes(g.MemoryPeakBytes), g.Samples)
		}
	}
	if r.Output.Files > 0 || len(r.Output.Missing) > 0 || r.State == StateReleased {
		out := fmt.Sprintf("%d file(s), %s", r.Output.Files, HumanBytes(r.Output.Bytes))
		if r.Output.Partial {
			out += ", partial"
		}
		if len(r.Output.Missing) > 0 {
			out += "; missing: " + strings.Join(r.Output.Missing, ", ")
		}
		if r.Output.DeletedAt != nil {
			out += "; deleted " + r.Output.DeletedAt.Format(time.RFC3339)
		}
		p.printf("output   %s\n", out)
	}
	if l := r.Logs; l != nil {
		logs := fmt.Sprintf("%s stdout, %s stderr", HumanBytes(l.StdoutBytes), HumanBytes(l.StderrBytes))
		if l.Truncated {
			logs += " (only the head and tail of each kept)"
		}
		p.printf("logs     %s: e31 logs %s\n", logs, r.Job)
	}
	if r.DataDeletedAt != nil {
		p.printf("data     deleted %s\n", r.DataDeletedAt.Format(time.RFC3339))
	}
	for _, f := range r.Flags {
		p.printf("flag     %s\n", f)
	}
	return p.err
}

// WriteStderrTail writes, under a record written by WriteText, the last
// lines job wrote to stderr, if any: what a user asks first about a job
// that failed.
func WriteStderrTail(w io.Writer, job string, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	p := &stickyWriter{w: w}
	p.printf("stderr   (its last lines; all of it: e31 logs %s)\n", job)
	for _, l := range lines {
		p.printf("         %s\n", l)
	}
	return p.err
}

// WriteTable writes records as a table, one line per job.
func WriteTable(w io.Writer, recs []*HoldRecord) error {
	p := &stickyWriter{w: w}
	p.printf("%-36s  %-10s  %-15s  %-8s  %10s  %12s  %s\n", "JOB", "STATE", "OUTCOME", "NODE", "HELD_S", "CPU_CORE_S", "NAME")
	if p.err != nil {
		return p.err
	}
	return WriteTableBody(w, recs)
}

// WriteTableBody writes the lines of WriteTable's table without its
// header: a table written a page at a time. Its columns have fixed widths,
// so the pages line up.
func WriteTableBody(w io.Writer, recs []*HoldRecord) error {
	p := &stickyWriter{w: w}
	for _, r := range recs {
		p.printf("%-36s  %-10s  %-15s  %-8s  %10.3f  %12.3f  %s\n", r.Job, r.State, r.Outcome, r.Node, r.HeldSeconds, r.CPUCoreSeconds, r.Name)
	}
	return p.err
}

// CSVColumns are the CSV columns of a record: one line per job, the
// meter's totals, the measured usage beside it, and the digest that ties
// the line to the events it was built from.
var CSVColumns = []string{"job", "name", "submitter", "state", "outcome", "exit_code", "node", "attempts",
	"cpu", "memory_bytes", "gpu", "disk_bytes", "limit_seconds",
	"submitted_at", "held_at", "released_at",
	"held_seconds", "cpu_core_seconds", "memory_gib_seconds", "gpu_seconds",
	"usage_cpu_seconds", "usage_max_rss_bytes", "output_files", "output_bytes", "events_digest"}

// WriteCSV writes records as CSV under a header of CSVColumns: numbers
// exact and as short as they go, times RFC 3339 in UTC.
func WriteCSV(w io.Writer, recs []*HoldRecord) error {
	return WriteCSVRows(w, CSVColumns, csvRows(recs))
}

// WriteCSVBody writes the rows of WriteCSV without its header: CSV
// written a page at a time.
func WriteCSVBody(w io.Writer, recs []*HoldRecord) error {
	cw := csv.NewWriter(w)
	if err := cw.WriteAll(csvRows(recs)); err != nil {
		return err
	}
	return cw.Error()
}

// csvRows are records' CSV rows, in CSVColumns' order.
func csvRows(recs []*HoldRecord) [][]string {
	rows := make([][]string, 0, len(recs))
	for _, r := range recs {
		exit := ""
		if r.ExitCode != nil {
			exit = strconv.Itoa(*r.ExitCode)
		}
		rows = append(rows, []string{r.Job, r.Name, r.Submitter, r.State, string(r.Outcome), exit, r.Node, strconv.Itoa(len(r.Attempts)),
			CSVNumber(r.Request.CPU), strconv.FormatInt(r.Request.MemoryBytes, 10), strconv.Itoa(r.Request.GPU),
			strconv.FormatInt(r.Request.DiskBytes, 10), CSVNumber(r.Request.LimitSeconds),
			csvTime(r.SubmittedAt), csvTime(r.HeldAt), csvTime(r.ReleasedAt),
			CSVNumber(r.HeldSeconds), CSVNumber(r.CPUCoreSeconds), CSVNumber(r.MemoryGiBSeconds), CSVNumber(r.GPUSeconds),
			CSVNumber(r.Usage.CPUSeconds), strconv.FormatInt(r.Usage.MaxRSSBytes, 10),
			strconv.Itoa(r.Output.Files), strconv.FormatInt(r.Output.Bytes, 10), r.EventsDigest})
	}
	return rows
}

// WriteCSVRows writes a header and its rows as CSV.
func WriteCSVRows(w io.Writer, header []string, rows [][]string) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	if err := cw.WriteAll(rows); err != nil {
		return err
	}
	return cw.Error()
}

// CSVNumber writes a number exactly, as short as it goes.
func CSVNumber(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func csvTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
