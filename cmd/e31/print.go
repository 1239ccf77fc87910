package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// printRecord writes a hold record for people; --json gives the exact one.
func printRecord(w io.Writer, r *hold.HoldRecord) {
	title := r.Job
	if r.Name != "" {
		title += "  " + r.Name
	}
	fmt.Fprintf(w, "job      %s  (submitted by %s)\n", title, r.Submitter)
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
	fmt.Fprintf(w, "outcome  %s\n", outcome)
	q := r.Request
	fmt.Fprintf(w, "request  %g cpu, %s memory, limit %s\n", q.CPU, humanBytes(q.MemoryBytes), (time.Duration(q.LimitSeconds * float64(time.Second))).String())
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
		fmt.Fprintln(w, line)
	}
	if len(r.Attempts) > 0 {
		fmt.Fprintf(w, "meter    %.3f s held: %.3f cpu-core-s, %.3f memory-GiB-s, %.3f gpu-s\n",
			r.HeldSeconds, r.CPUCoreSeconds, r.MemoryGiBSeconds, r.GPUSeconds)
		fmt.Fprintf(w, "usage    %.3f cpu-seconds, %s peak memory\n", r.Usage.CPUSeconds, humanBytes(r.Usage.MaxRSSBytes))
	}
	if r.Output.Files > 0 || len(r.Output.Missing) > 0 || r.State == hold.StateReleased {
		out := fmt.Sprintf("%d file(s), %s", r.Output.Files, humanBytes(r.Output.Bytes))
		if r.Output.Partial {
			out += ", partial"
		}
		if len(r.Output.Missing) > 0 {
			out += "; missing: " + strings.Join(r.Output.Missing, ", ")
		}
		if r.Output.DeletedAt != nil {
			out += "; deleted " + r.Output.DeletedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "output   %s\n", out)
	}
	if l := r.Logs; l != nil {
		logs := fmt.Sprintf("%s stdout, %s stderr", humanBytes(l.StdoutBytes), humanBytes(l.StderrBytes))
		if l.Truncated {
			logs += " (only the head and tail of each kept)"
		}
		fmt.Fprintf(w, "logs     %s: e31 logs %s\n", logs, r.Job)
	}
	if r.DataDeletedAt != nil {
		fmt.Fprintf(w, "data     deleted %s\n", r.DataDeletedAt.Format(time.RFC3339))
	}
}

// humanBytes writes a size for people.
func humanBytes(n int64) string { return client.HumanBytes(n) }

// stderrLines is how many of the last lines of stderr `e31 wait` shows for
// a job that did not succeed.
const stderrLines = 10

// printStderrTail writes the last lines a job wrote to stderr, if any.
func printStderrTail(w io.Writer, job string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "stderr   (its last lines; all of it: e31 logs %s)\n", job)
	for _, l := range lines {
		fmt.Fprintf(w, "         %s\n", l)
	}
}
