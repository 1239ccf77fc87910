package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
)

// TestQuotasAreSetShownAndEnforced: through the CLI, with authentication
// on, the operator limits alice; she sees her limits; a job beyond
// max-queued and one naming an image not allowed are rejected with the
// reason while the jobs accepted before succeed; staging beyond max-data
// fails with the limit named and keeps what was stored.
func TestQuotasAreSetShownAndEnforced(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	if out, errOut, code := ts.setup("--submitter", "alice", "--max-queued", "2", "--max-data", "1MiB",
		"--allow-image", "alice/tools:1"); code != 0 {
		t.Fatalf("e31 setup: exit %d\n%s%s", code, out, errOut)
	}

	out, errOut, code := ts.cli("limits", "--json")
	var got client.LimitsReport
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("alice: e31 limits --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if got.Submitter != "alice" || got.MaxQueued != 2 || got.MaxDataBytes != 1<<20 || got.MaxRate != limits.DefaultMaxRate ||
		len(got.Images) != 1 || got.Images[0] != "alice/tools:1" {
		t.Errorf("alice's limits: %+v", got)
	}
	out, _, code = ts.cliAs("bob", "limits")
	if code != 0 || !strings.Contains(out, "at most 200000 jobs (max-queued)") || strings.Contains(out, "alice") {
		t.Errorf("bob: e31 limits: exit %d\n%s", code, out)
	}

	// Two jobs queue; the third is one too many.
	slow := writeJob(t, `
work: {command: ["/bin/sh", "-c", "sleep 2; echo done > $E31_OUTPUT/d.txt"]}
request: {cpu: 0.1, memory: 32MiB, limit: 1m}
output: [d.txt]
`, nil)
	first, second := ts.submit(slow), ts.submit(slow)
	third := ts.submit(slow)
	rec, code := ts.wait(third)
	if code == 0 || rec.Outcome != events.Rejected || rec.Reason != "quota: alice may have at most 2 jobs queued (max-queued), 2 are" {
		t.Errorf("the third job: %s (%s), want rejected for max-queued", rec.Outcome, rec.Reason)
	}
	for _, id := range []string{first, second} {
		if rec, _ := ts.wait(id); rec.Outcome != events.Succeeded {
			t.Errorf("job %s accepted before the quota was reached: %s (%s)", id, rec.Outcome, rec.Reason)
		}
	}

	imaged := writeJob(t, "work: {command: [/bin/true], image: \"bob/private:1\"}\nrequest: {limit: 1m, cpu: 0.1}\n", nil)
	rec, _ = ts.wait(ts.submit(imaged))
	if want := `work.image: image "bob/private:1" is not allowed for alice; allowed: alice/tools:1`; rec.Outcome != events.Rejected || rec.Reason != want {
		t.Errorf("a job naming another's image: %s (%q), want rejected: %q", rec.Outcome, rec.Reason, want)
	}

	// 600 KiB fits in 1 MiB; another 600 KiB does not.
	fits := writeJob(t, "work: {command: [/bin/true]}\ndata: [{name: a, path: a.bin}]\nrequest: {limit: 1m, cpu: 0.1}\n",
		map[string]string{"a.bin": strings.Repeat("a", 600<<10)})
	kept := ts.submit(fits)
	tooMuch := writeJob(t, "work: {command: [/bin/true]}\ndata: [{name: b, path: b.bin}]\nrequest: {limit: 1m, cpu: 0.1}\n",
		map[string]string{"b.bin": strings.Repeat("b", 600<<10)})
	_, errOut, code = ts.cli("submit", "--quiet", tooMuch)
	if code != exitUsage || !strings.Contains(errOut, "at most 1 MiB (max-data)") || !strings.Contains(errOut, "nothing stored before was lost") {
		t.Errorf("staging past max-data: exit %d %q, want exit %d naming max-data", code, errOut, exitUsage)
	}
	if rec, _ := ts.wait(kept); rec.Outcome != events.Succeeded {
		t.Errorf("the job whose data was staged first: %s (%s)", rec.Outcome, rec.Reason)
	}

	// A max-data below what the bucket holds is refused, and changes nothing.
	if _, errOut, code := ts.setup("--submitter", "alice", "--max-data", "100KiB"); code != exitUsage || !strings.Contains(errOut, "nothing changed") {
		t.Errorf("lowering max-data below what alice holds: exit %d %q", code, errOut)
	}
}

// lockedBuffer is a buffer that a connection's callbacks may write to
// after the command returned (e31 setup logs its connection's close).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// setup runs e31 setup as the operator.
func (ts *testSystem) setup(args ...string) (stdout, stderr string, code int) {
	var out, errOut lockedBuffer
	code = execute(append(append([]string{"setup"}, args...), "--nats", ts.url, "--creds", ts.creds(events.Operator), "--log-level", "warn"), &out, &errOut)
	return out.String(), errOut.String(), code
}
