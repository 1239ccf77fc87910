package client

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/query/wire"
)

// What the client's answers look like to people, as the e31 command
// prints them: each form here is public (scripts read it), so it changes
// only by adding.

// printer remembers the first error of its writes, so that a page of
// Fprintf calls checks once.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// String is the status on one line: the id, the state, how it ended or
// where it runs, and why.
func (s Status) String() string {
	line := fmt.Sprintf("%s  %s", s.ID, s.State)
	if s.Outcome != "" && s.Over {
		line += " (" + string(s.Outcome) + ")"
	}
	if s.Node != "" && !s.Over {
		line += " on " + s.Node
	}
	if s.Reason != "" {
		line += ": " + s.Reason
	}
	return line
}

// Note says, for people, that the ledger had not read the whole log when
// it answered, and what that means for the answer (what); "" if it had.
func (b Behind) Note(what string) string {
	switch {
	case b.Applied < b.Last:
		return fmt.Sprintf("note: the ledger is catching up: it has read the log up to #%d of #%d (%d behind); %s", b.Applied, b.Last, b.Last-b.Applied, what)
	case b.CatchingUp:
		return "note: the ledger is catching up; " + what
	}
	return ""
}

// WriteTotalsTable writes each submitter's bill as a table.
func WriteTotalsTable(w io.Writer, ts []wire.Totals) error {
	p := &printer{w: w}
	p.printf("%-20s  %6s  %8s  %12s  %14s  %16s  %12s  %5s  %12s\n", "SUBMITTER", "JOBS", "ATTEMPTS", "HELD_S", "CPU_CORE_S", "MEMORY_GIB_S", "GPU_S", "OPEN", "LOST_S")
	for _, t := range ts {
		p.printf("%-20s  %6d  %8d  %12.3f  %14.3f  %16.3f  %12.3f  %5d  %12.3f\n",
			t.Submitter, t.Jobs, t.Attempts, t.HeldSeconds, t.CPUCoreSeconds, t.MemoryGiBSeconds, t.GPUSeconds, t.Open, t.LostSeconds)
	}
	return p.err
}

// WriteTotalsCSV writes each submitter's bill as CSV, one line each.
func WriteTotalsCSV(w io.Writer, ts []wire.Totals) error {
	n := hold.CSVNumber
	rows := make([][]string, 0, len(ts))
	for _, t := range ts {
		rows = append(rows, []string{t.Submitter, strconv.Itoa(t.Jobs), strconv.Itoa(t.Attempts), n(t.HeldSeconds),
			n(t.CPUCoreSeconds), n(t.MemoryGiBSeconds), n(t.GPUSeconds), strconv.Itoa(t.Open), n(t.LostSeconds)})
	}
	return hold.WriteCSVRows(w, []string{"submitter", "jobs", "attempts", "held_seconds", "cpu_core_seconds", "memory_gib_seconds", "gpu_seconds", "open", "lost_seconds"}, rows)
}

// WriteText writes the sweep for people: its jobs by state and outcome,
// and the first jobs that did not succeed, by their index in the sweep.
func (s SweepSummary) WriteText(w io.Writer) error {
	p := &printer{w: w}
	p.printf("sweep %s: %d jobs, %.3f s held in all\n", s.Sweep, s.Jobs, s.HeldSeconds)
	if s.Replaced > 0 {
		p.printf("  submitted again: %d (each point counts as its latest)\n", s.Replaced)
	}
	p.printf("  states:   %s\n", counts(s.States))
	if len(s.Outcomes) > 0 {
		p.printf("  outcomes: %s\n", counts(s.Outcomes))
	}
	listed := 0
	for _, r := range s.Records {
		if !r.Over() || r.Outcome == events.Succeeded || r.Sweep == nil {
			continue
		}
		if listed == maxListed {
			p.printf("  … and more that did not succeed (e31 status %s --json; e31 logs %s --failed)\n", s.Sweep, s.Sweep)
			break
		}
		listed++
		p.printf("  [%d] value %q: %s: %s (%s)\n", r.Sweep.Index, r.Sweep.Value, r.Outcome, r.Reason, r.Job)
	}
	return p.err
}

// counts writes "2 released, 1 waiting", by name.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return strings.Join(parts, ", ")
}

// WriteStoredTable writes what jobs keep in the store, a line each.
func WriteStoredTable(w io.Writer, jobs []wire.Stored) error {
	p := &printer{w: w}
	p.printf("%-36s  %-10s  %-10s  %-20s  %s\n", "JOB", "DATA", "OUTPUT", "EXPIRES", "NAME")
	for _, j := range jobs {
		expires := "(running)"
		if j.Expires != nil {
			expires = j.Expires.UTC().Format("2006-01-02T15:04:05Z")
		}
		p.printf("%-36s  %-10s  %-10s  %-20s  %s\n", j.Job, partText(j.Data), partText(j.Output), expires, j.Name)
	}
	return p.err
}

func partText(p wire.StoredPart) string {
	switch {
	case p.DeletedAt != nil:
		return "deleted"
	case p.Files == 0:
		return "-"
	}
	return HumanBytes(p.Bytes)
}

// WriteText says what the deletion did, a line for each part of the job's
// store: already deleted, none stored, deleted now, or to be deleted when
// the job ends.
func (d Deletion) WriteText(w io.Writer) error {
	p := &printer{w: w}
	if d.Nothing {
		p.printf("job %s keeps nothing in the store\n", d.Job)
	}
	var asked []string
	for _, part := range d.Parts {
		switch {
		case part.DeletedAt != nil:
			p.printf("job %s: %s already deleted at %s\n", d.Job, part.What, part.DeletedAt.UTC().Format(time.RFC3339))
		case part.None:
			p.printf("job %s has no %s stored\n", d.Job, part.What)
		default:
			asked = append(asked, part.What)
		}
	}
	if d.Later {
		p.printf("job %s: deletion of its %s requested; it is done when the job ends\n", d.Job, strings.Join(asked, " and "))
	}
	for _, del := range d.Deleted {
		p.printf("job %s: %s deleted (%d file(s), %s)\n", d.Job, del.What, del.Files, HumanBytes(del.Bytes))
	}
	return p.err
}

// WriteText writes the submitter's limits and its data bucket's use.
func (r LimitsReport) WriteText(w io.Writer) error {
	images := "none"
	if len(r.Images) > 0 {
		images = strings.Join(r.Images, ", ")
	}
	p := &printer{w: w}
	p.printf("submitter   %s\n", r.Submitter)
	p.printf("data        %s of %s (max-data)\n", HumanBytes(r.DataBytes), SizeOrUnlimited(r.MaxDataBytes))
	p.printf("queued      at most %s jobs (max-queued)\n", countOrUnlimited(r.MaxQueued))
	p.printf("rate        at most %s jobs a minute (max-rate)\n", countOrUnlimited(r.MaxRate))
	p.printf("images      %s\n", images)
	return p.err
}

// WriteText says what SetLimits changed: each policy written, and each
// data bucket bounded.
func (s LimitsSet) WriteText(w io.Writer) error {
	p := &printer{w: w}
	for _, kp := range s.Policies {
		p.printf("%s %s: %s\n", limits.Bucket, kp.Key, DescribePolicy(kp.Policy))
	}
	for _, u := range s.Bounded {
		p.printf("%s: at most %s (max-data)\n", events.DataBucketFor(u), SizeOrUnlimited(*s.MaxDataBytes))
	}
	return p.err
}

// DescribePolicy is a stored policy for people: the limits it sets, or
// "the defaults".
func DescribePolicy(p limits.Policy) string {
	var parts []string
	if p.MaxDataBytes != nil {
		parts = append(parts, "max-data "+SizeOrUnlimited(*p.MaxDataBytes))
	}
	if p.MaxQueued != nil {
		parts = append(parts, "max-queued "+countOrUnlimited(*p.MaxQueued))
	}
	if p.MaxRate != nil {
		parts = append(parts, "max-rate "+countOrUnlimited(*p.MaxRate)+"/min")
	}
	if len(p.Images) > 0 {
		parts = append(parts, "images "+strings.Join(p.Images, ", "))
	}
	if len(parts) == 0 {
		return "the defaults"
	}
	return strings.Join(parts, "; ")
}

// SizeOrUnlimited is a size limit for people.
func SizeOrUnlimited(n int64) string {
	if n == limits.Unlimited {
		return "unlimited"
	}
	return HumanBytes(n)
}

func countOrUnlimited(n int) string {
	if n == limits.Unlimited {
		return "unlimited"
	}
	return strconv.Itoa(n)
}

// EventLine is a stored event on one line: its sequence, time, type and
// id, or why it is not a valid event.
func EventLine(m wire.StoredEvent) string {
	env, err := Decode(m)
	if err != nil {
		return fmt.Sprintf("#%-6d %s  (not a valid event: %v)", m.Seq, m.Subject, err)
	}
	return fmt.Sprintf("#%-6d %s  %-16s %s", env.Seq, env.Time.Format("2006-01-02T15:04:05.000Z07:00"), events.Name(env.Type), env.ID)
}

// WriteOutputText says what Output wrote into dir: how many files, how
// big, whether partial, and what the job did not make.
func WriteOutputText(w io.Writer, rec *hold.HoldRecord, dir string) error {
	note := ""
	if rec.Output.Partial {
		note = " (partial: the job did not finish)"
	}
	p := &printer{w: w}
	p.printf("%d file(s), %s, written to %s%s\n", rec.Output.Files, HumanBytes(rec.Output.Bytes), dir, note)
	if len(rec.Output.Missing) > 0 {
		p.printf("missing: %s\n", strings.Join(rec.Output.Missing, ", "))
	}
	return p.err
}

// WriteAuditText writes an audit's findings, a line each, and its summary.
func WriteAuditText(w io.Writer, rep *audit.Report) error {
	p := &printer{w: w}
	for _, f := range rep.Findings {
		where := f.Job
		if f.Seq > 0 {
			where += fmt.Sprintf(" #%d", f.Seq)
		}
		p.printf("%-14s %s: %s\n", f.Kind, where, f.Detail)
	}
	p.printf("%s\n", rep.Summary())
	return p.err
}

// ParseTime reads an RFC 3339 time, or a date meaning its midnight UTC.
func ParseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Parse(time.DateOnly, s)
}

// Succeeded reports whether every job of the sweep succeeded.
func (s SweepSummary) Succeeded() bool {
	for _, r := range s.Records {
		if r.Outcome != events.Succeeded {
			return false
		}
	}
	return true
}
