package hold

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
)

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 512 << 20: "512 MiB", 2 << 30: "2 GiB"} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// record is a job that failed on its second attempt, after its first
// node was lost.
func record() *HoldRecord {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	later := at.Add(2 * time.Second)
	exit := 3
	return &HoldRecord{Job: "j1", Name: "count", Submitter: "alice", Node: "node-2", State: StateReleased,
		Outcome: events.Failed, ExitCode: &exit, Reason: "exit status 3",
		Request:     Request{CPU: 0.5, MemoryBytes: 512 << 20, LimitSeconds: 600},
		SubmittedAt: &at, HeldAt: &at, ReleasedAt: &later, HeldSeconds: 3, CPUCoreSeconds: 1.5,
		Usage:  events.Usage{CPUSeconds: 0.25, MaxRSSBytes: 2048},
		Output: Output{Files: 1, Bytes: 2, Partial: true, Missing: []string{"b.txt"}},
		Logs:   &events.Logs{StdoutBytes: 10, StderrBytes: 2048, Truncated: true},
		Attempts: []Attempt{
			{Attempt: 1, Node: "node-1", HeldAt: &at, ReleasedAt: &at, HeldSeconds: 1, Outcome: events.NodeLost},
			{Attempt: 2, Node: "node-2", HeldAt: &at, ReleasedAt: &later, HeldSeconds: 2, Outcome: events.Failed},
		}}
}

// The text `e31 wait` and `e31 ledger ID` print: scripts and people read
// it, so it changes only by adding.
func TestWriteText(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, record()); err != nil {
		t.Fatal(err)
	}
	if err := WriteStderrTail(&b, "j1", []string{"boom"}); err != nil {
		t.Fatal(err)
	}
	want := `job      j1  count  (submitted by alice)
outcome  failed (exit 3): exit status 3
request  0.5 cpu, 512 MiB memory, limit 10m0s
held     attempt 1 on node-1 from 2026-12-01T10:00:00Z for 1.000 s → node_lost
held     attempt 2 on node-2 from 2026-12-01T10:00:00Z for 2.000 s → failed
meter    3.000 s held: 1.500 cpu-core-s, 0.000 memory-GiB-s, 0.000 gpu-s
usage    0.250 cpu-seconds, 2 KiB peak memory
output   1 file(s), 2 B, partial; missing: b.txt
logs     10 B stdout, 2 KiB stderr (only the head and tail of each kept): e31 logs j1
stderr   (its last lines; all of it: e31 logs j1)
         boom
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := WriteStderrTail(&b, "j1", nil); err != nil || b.Len() != 0 {
		t.Errorf("no stderr: wrote %q, %v; want nothing", b.String(), err)
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, []*HoldRecord{record()}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "JOB ") || !strings.HasSuffix(lines[1], "3.000         1.500  count") {
		t.Errorf("table:\n%s", b.String())
	}
}

// A CSV line per record under CSVColumns, numbers exact.
func TestWriteCSV(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCSV(&b, []*HoldRecord{record()}); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil || len(rows) != 2 {
		t.Fatalf("CSV %q: %d rows, %v", b.String(), len(rows), err)
	}
	got := map[string]string{}
	for i, col := range rows[0] {
		got[col] = rows[1][i]
	}
	for col, want := range map[string]string{"job": "j1", "exit_code": "3", "attempts": "2", "cpu": "0.5", "memory_bytes": "536870912",
		"held_at": "2026-12-01T10:00:00Z", "released_at": "2026-12-01T10:00:02Z", "held_seconds": "3", "cpu_core_seconds": "1.5"} {
		if got[col] != want {
			t.Errorf("column %s = %q, want %q", col, got[col], want)
		}
	}
	if len(rows[0]) != len(CSVColumns) {
		t.Errorf("header %v, want %v", rows[0], CSVColumns)
	}
}

// TestWriteTextShowsTheFlags: what a hold could not contain is shown, a
// line each, under the rest.
func TestWriteTextShowsTheFlags(t *testing.T) {
	t.Parallel()
	r := &HoldRecord{Job: "j", State: StateReleased, Flags: []string{"attempt 1: usage_beyond_hold: cpu_seconds 86400 > 1 cpu × 21 s held"}}
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\nflag     attempt 1: usage_beyond_hold: cpu_seconds 86400 > 1 cpu × 21 s held\n") {
		t.Errorf("the text does not show the flag:\n%s", b.String())
	}
}
