package hostile_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"
)

// honestWait bounds how long the honest tenant waits for one of its jobs:
// they run for seconds, so a job still not over after this was stopped by
// an attack, not by load.
const honestWait = 30 * time.Second

// honestJob is one job of the honest tenant and what its output must be.
type honestJob struct {
	id, name string
	// file is the job file, in a folder with its input.
	file string
	// want is the content of out.txt, the job's one output: its input,
	// staged from the tenant's machine, and a line the job writes.
	want string
}

// newHonestJob writes a job file that copies a staged input, unique to
// this job, to its output after sleeping for sleep: a job with data in and
// out, so that an attack on the store or on the log shows in what comes
// back.
func newHonestJob(t testing.TB, name string, sleep time.Duration) honestJob {
	t.Helper()
	dir := t.TempDir()
	input := fmt.Sprintf("input of %s, written at %s\n", name, time.Now().Format(time.RFC3339Nano))
	if err := os.WriteFile(filepath.Join(dir, "input.txt"), []byte(input), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "job.yaml")
	job := fmt.Sprintf(`name: %s
work:
  command: ["/bin/sh", "-c", "sleep %g; cat \"$E31_DATA/input\" > \"$E31_OUTPUT/out.txt\"; echo done >> \"$E31_OUTPUT/out.txt\""]
data:
  - name: input
    path: ./input.txt
request:
  cpu: 0.25
  memory: 64MiB
  disk: 16MiB
  limit: 1m
output:
  - out.txt
`, name, sleep.Seconds())
	if err := os.WriteFile(file, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	return honestJob{name: name, file: file, want: input + "done\n"}
}

// submitHonest submits a job as the honest tenant, with the CLI, and
// returns at once.
func submitHonest(t testing.TB, name string, sleep time.Duration) honestJob {
	t.Helper()
	j := newHonestJob(t, name, sleep)
	r := e31(t, honest, time.Minute, "submit", j.file, "--json")
	var got struct {
		ID string `json:"id"`
	}
	if r.err != nil || json.Unmarshal([]byte(r.stdout), &got) != nil || got.ID == "" {
		t.Fatalf("honest: e31 submit %s: %s", name, r)
	}
	j.id = got.ID
	return j
}

// record is the part of a hold record (README.md) the honest tenant
// checks.
type record struct {
	Job     string `json:"job"`
	State   string `json:"state"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	Node    string `json:"node"`
}

// runHonest is the honest tenant's everyday: `e31 submit --wait`, then
// `e31 output`. Any way it does not succeed, with exactly its output, is
// an error of the attack named.
func runHonest(t testing.TB, w *watcher, attack, name string) honestJob {
	t.Helper()
	j := newHonestJob(t, name, 0)
	r := e31(t, honest, honestWait+20*time.Second, "submit", j.file, "--wait", "--json", "--timeout", honestWait.String())
	var rec record
	_ = json.Unmarshal([]byte(r.stdout), &rec)
	j.id = rec.Job
	if j.id == "" {
		// Without a record, the id is in what the CLI said.
		j.id = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`).FindString(r.stderr)
	}
	if r.err != nil || rec.Outcome != "succeeded" {
		events := "unknown"
		if j.id != "" {
			events = w.describe(j.id)
		}
		t.Errorf("%s: honest's job %s (%s) submitted with `e31 submit --wait` did not succeed; its events: %s; e31 submit: %s", attack, name, j.id, events, r)
		return j
	}
	j.checkOutput(t, attack)
	return j
}

// succeeded checks that the job ended as succeeded, with its output
// intact. If it did not, the operator's reading of its events says how
// far it got.
func (j honestJob) succeeded(t testing.TB, w *watcher, attack string) {
	t.Helper()
	r := e31(t, honest, honestWait+20*time.Second, "wait", j.id, "--json", "--timeout", honestWait.String())
	var rec record
	_ = json.Unmarshal([]byte(r.stdout), &rec)
	if r.err != nil || rec.Outcome != "succeeded" {
		t.Errorf("%s: honest's job %s (%s) did not succeed: state %q, outcome %q, reason %q; its events: %s; e31 wait: %s",
			attack, j.name, j.id, rec.State, rec.Outcome, rec.Reason, w.describe(j.id), r)
		return
	}
	j.checkOutput(t, attack)
}

// checkOutput fetches the job's output with `e31 output` and compares it
// with what the job wrote.
func (j honestJob) checkOutput(t testing.TB, attack string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "out")
	r := e31(t, honest, time.Minute, "output", j.id, "-o", dir)
	if r.err != nil {
		t.Errorf("%s: e31 output of honest's job %s (%s) failed: %s", attack, j.name, j.id, r)
		return
	}
	got, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if err != nil {
		t.Errorf("%s: honest's job %s (%s) returned no out.txt: %v", attack, j.name, j.id, err)
		return
	}
	if string(got) != j.want {
		t.Errorf("%s: honest's job %s (%s) returned out.txt %q, want %q", attack, j.name, j.id, got, j.want)
	}
}

// aftermath checks what must hold after every attack: the honest jobs
// that lived through it succeeded with their output, a new honest job
// does too, the log holds nothing after seq before that mallory could not
// have written, it has no more consumers than at rest, and `e31 audit`
// passes.
func aftermath(t *testing.T, s *suite, attack string, before uint64, jobs ...honestJob) {
	t.Helper()
	t.Run("aftermath", func(t *testing.T) {
		// Waited for together: an attack that froze them costs one
		// honestWait, not one each.
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Go(func() { j.succeeded(t, s.w, attack) })
		}
		wg.Go(func() { runHonest(t, s.w, attack, "after-"+attack) })
		wg.Wait()
		reportForeign(t, attack, s.w.foreign(t, before, mallory))

		// Readers' consumers go away a few seconds after their last use:
		// count again each time the server says it deleted one.
		n, names := s.w.consumersGone(t, s.baseline, 15*time.Second)
		if n > s.baseline {
			t.Errorf("%s: the %s stream has %d consumers 15 s after the attack, %d at rest: %s",
				attack, logStream, n, s.baseline, clip(names, 3000))
		}

		// The audit reads the whole log with an ordered consumer, which
		// the auditor may not delete: the server removes it once idle
		// (nats.go's default: 5 minutes). That one is the check's, not
		// the attack's: the next aftermath allows it.
		before, _ := s.w.consumers(t)
		r := e31(t, auditor, 2*time.Minute, "audit")
		if r.err != nil {
			t.Errorf("%s: e31 audit (auditor's credentials) failed: %s", attack, r)
		}
		if after, _ := s.w.consumers(t); after > before {
			t.Logf("e31 audit left %d consumer(s) on the log, until the server removes them", after-before)
			s.baseline += after - before
		}
	})
}
