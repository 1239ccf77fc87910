package compromised_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// honestJob is one job of the honest tenant and what its output must be.
type honestJob struct {
	id, name string
	// want is the content of out.txt: its staged input and a line.
	want string
}

// submitHonest submits, with the CLI, a job that copies a staged input
// unique to it to its output after sleep, and returns at once. With image,
// the job names it: the bait, which only the rogue takes.
func submitHonest(t testing.TB, name string, sleep time.Duration, image string) honestJob {
	t.Helper()
	dir := t.TempDir()
	input := fmt.Sprintf("input of %s, written at %s\n", name, time.Now().Format(time.RFC3339Nano))
	if err := os.WriteFile(filepath.Join(dir, "input.txt"), []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	request := "cpu: 0.25\n  memory: 64MiB"
	work := fmt.Sprintf(`command: ["/bin/sh", "-c", "sleep %g; cat \"$E31_DATA/input\" > \"$E31_OUTPUT/out.txt\"; echo done >> \"$E31_OUTPUT/out.txt\""]`, sleep.Seconds())
	if image != "" {
		request = "cpu: 0.05\n  memory: 8MiB"
		work += "\n  image: " + image
	}
	job := fmt.Sprintf(`name: %s
work:
  %s
data:
  - name: input
    path: ./input.txt
request:
  %s
  disk: 1MiB
  limit: 2m
output:
  - out.txt
`, name, work, request)
	file := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(file, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e31(t, honest, time.Minute, "submit", file, "--json")
	var got struct {
		ID string `json:"id"`
	}
	if r.err != nil || json.Unmarshal([]byte(r.stdout), &got) != nil || got.ID == "" {
		t.Fatalf("honest: e31 submit %s: %s", name, r)
	}
	return honestJob{id: got.ID, name: name, want: input + "done\n"}
}

// record is the part of a hold record honest checks (README.md).
type record struct {
	Job      string `json:"job"`
	Outcome  string `json:"outcome"`
	Reason   string `json:"reason"`
	Node     string `json:"node"`
	Attempts []struct {
		Attempt int    `json:"attempt"`
		Node    string `json:"node"`
		Outcome string `json:"outcome"`
		Usage   struct {
			CPUSeconds float64 `json:"cpu_seconds"`
		} `json:"usage"`
	} `json:"attempts"`
	Events []struct {
		Seq      uint64 `json:"seq"`
		Type     string `json:"type"`
		SetAside bool   `json:"set_aside"`
	} `json:"events"`
}

// wait waits for the job with `e31 wait` and returns its record.
func (j honestJob) wait(t testing.TB) (record, cliResult) {
	t.Helper()
	r := e31(t, honest, 90*time.Second, "wait", j.id, "--json", "--timeout", "80s")
	var rec record
	_ = json.Unmarshal([]byte(r.stdout), &rec)
	return rec, r
}

// output fetches the job's output with `e31 output` and returns out.txt.
func (j honestJob) output(t testing.TB) (string, cliResult) {
	t.Helper()
	dir := t.TempDir()
	r := e31(t, honest, time.Minute, "output", j.id, "-o", dir)
	b, _ := os.ReadFile(filepath.Join(dir, "out.txt"))
	return string(b), r
}

// watcher is the operator's view: the log and the leases, read directly.
type watcher struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	log    jetstream.Stream
	leases jetstream.KeyValue
}

func newWatcher(t testing.TB) *watcher {
	t.Helper()
	w := &watcher{nc: connect(t, operator)}
	var err error
	if w.js, err = jetstream.New(w.nc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if w.log, err = w.js.Stream(ctx, logStream); err != nil {
		t.Fatal(err)
	}
	if w.leases, err = w.js.KeyValue(ctx, leasesBucket); err != nil {
		t.Fatal(err)
	}
	return w
}

// stored is one message of the log.
type stored struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
}

func (s stored) ceType() string { return s.header.Get("ce-type") }

// jobEvents reads every message of a job, in order.
func (w *watcher) jobEvents(t testing.TB, job string) []stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []stored
	for seq := uint64(1); ; {
		m, err := w.log.GetMsg(ctx, seq, jetstream.WithGetMsgSubject("e31.job."+job+".>"))
		if err != nil {
			return out
		}
		out = append(out, stored{seq: m.Sequence, subject: m.Subject, header: m.Header, data: m.Data})
		seq = m.Sequence + 1
	}
}

// journey lists a job's events by the last tokens of their subjects.
func journey(evs []stored) string {
	var parts []string
	for _, e := range evs {
		if tokens := strings.SplitN(e.subject, ".", 4); len(tokens) == 4 {
			parts = append(parts, tokens[3])
		}
	}
	return strings.Join(parts, ", ")
}

// waitFor reads job's events until done says they are enough, or d
// passes: again whenever something is published on the job's subjects (the
// operator may listen to anything), and at least every half second.
func (w *watcher) waitFor(t testing.TB, job string, d time.Duration, done func([]stored) bool) ([]stored, bool) {
	t.Helper()
	news := make(chan *nats.Msg, 64)
	sub, err := w.nc.ChanSubscribe("e31.job."+job+".>", news)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }() // closing the connection ends it too
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		evs := w.jobEvents(t, job)
		if done(evs) {
			return evs, true
		}
		select {
		case <-news:
		case <-tick.C:
		case <-deadline.C:
			return w.jobEvents(t, job), false
		}
	}
}

// has says whether a job's events include one stored on a subject with
// the suffix.
func has(suffix string) func([]stored) bool {
	return func(evs []stored) bool {
		for _, e := range evs {
			if strings.HasSuffix(e.subject, suffix) {
				return true
			}
		}
		return false
	}
}

// leaseValues is every lease and its holder.
func (w *watcher) leaseValues(t testing.TB) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := w.leases.ListKeys(ctx)
	if err != nil {
		t.Fatalf("operator: the leases: %v", err)
	}
	out := map[string]string{}
	for k := range keys.Keys() {
		if e, err := w.leases.Get(ctx, k); err == nil {
			out[k] = string(e.Value())
		}
	}
	return out
}
