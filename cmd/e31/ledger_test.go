package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/services/ledger"
)

// TestLedgerAuditAndTamperEvidenceAfterAMixedRun runs a mixed set of jobs
// through e31 dev, then checks the whole ledger story from the outside, as
// a user and an auditor would: the audit passes, the meter is the held
// request times the held time, the chain head taken now vouches for the
// log later, and a copy of the log with one event deleted, duplicated or
// changed is caught, naming the event.
func TestLedgerAuditAndTamperEvidenceAfterAMixedRun(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 2)
	var ids []string
	for _, cmd := range []string{"true", "exit 3", "sleep 5", "echo x > $E31_OUTPUT/x"} {
		limit := "1m"
		if strings.HasPrefix(cmd, "sleep") {
			limit = "1s"
		}
		ids = append(ids, ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "`+cmd+`"]}
request: {cpu: 0.5, memory: 64MiB, limit: `+limit+`}
output: [{path: x, required: false}]
`, nil)))
	}
	pub := bus.NewPublisher(ts.client("bob").JetStream(), "e31/test", nil)
	if _, err := pub.Append(context.Background(), "rejected-one", &events.JobRequested{Submitter: "bob"}); err != nil {
		t.Fatal(err)
	}
	failed := ""
	for i, id := range ids {
		rec, _ := ts.wait(id)
		if i == 1 {
			failed = rec.Job
		}
	}
	ts.waitAs("bob", "rejected-one")
	ids = append(ids, "rejected-one")

	// The audit passes, and agrees with the ledger on the chain.
	out, _, code := ts.cliAs("auditor", "audit")
	if code != 0 || !strings.Contains(out, "audit passed") || !strings.Contains(out, "matches the ledger") || !strings.Contains(out, "passes through 1 head") {
		t.Fatalf("e31 audit: exit %d\n%s", code, out)
	}
	// The head (how far the log goes, the chain) is the auditor's and the
	// operator's: a submitter learns nothing of other tenants from it.
	if out, errOut, code := ts.cli("ledger", "--head"); code != exitUsage || out != "" || !strings.Contains(errOut, "not permitted") {
		t.Errorf("alice: e31 ledger --head: exit %d, %q %q; want not permitted", code, out, errOut)
	}
	headOut, _, code := ts.cliAs("auditor", "ledger", "--head")
	head, err := chain.ParseHead(headOut)
	if code != 0 || err != nil {
		t.Fatalf("e31 ledger --head: exit %d, %q: %v", code, headOut, err)
	}
	if out, _, code := ts.cliAs("auditor", "audit", "--since-head", head.String()); code != 0 {
		t.Fatalf("e31 audit --since-head %s: exit %d\n%s", head, code, out)
	}

	// The meter: held request times held time, per attempt and in total.
	recsJSON, _, _ := ts.cliAs("auditor", "ledger", "--json")
	var recs []*hold.HoldRecord
	if err := json.Unmarshal([]byte(recsJSON), &recs); err != nil || len(recs) != len(ids) {
		t.Fatalf("ledger has %d records (%v), want %d", len(recs), err, len(ids))
	}
	for _, r := range recs {
		var cpu float64
		for _, a := range r.Attempts {
			want := a.Held.CPU * a.HeldSeconds
			if a.Held.CPU != 0.5 || a.HeldSeconds <= 0 || math.Abs(a.CPUCoreSeconds-want) > 1e-9 ||
				math.Abs(a.MemoryGiBSeconds-a.HeldSeconds/16) > 1e-9 || a.GPUSeconds != 0 {
				t.Errorf("%s attempt %d: held %+v for %v s, meter %v core-s %v GiB-s; want 0.5 cpu and 64 MiB times the held time",
					r.Job, a.Attempt, a.Held, a.HeldSeconds, a.CPUCoreSeconds, a.MemoryGiBSeconds)
			}
			cpu += a.CPUCoreSeconds
		}
		if math.Abs(r.CPUCoreSeconds-cpu) > 1e-9 || !strings.HasPrefix(r.EventsDigest, "sha256:") && len(r.Events) > 0 {
			t.Errorf("%s: total %v core-s (attempts give %v), events digest %q", r.Job, r.CPUCoreSeconds, cpu, r.EventsDigest)
		}
	}

	// CSV: a header and one line per record.
	csvOut, _, code := ts.cliAs("auditor", "ledger", "--csv")
	rows, err := csv.NewReader(strings.NewReader(csvOut)).ReadAll()
	if code != 0 || err != nil || len(rows) != len(recs)+1 || rows[0][0] != "job" || rows[0][len(rows[0])-1] != "events_digest" {
		t.Errorf("e31 ledger --csv: exit %d, %v, %d rows:\n%s", code, err, len(rows), csvOut)
	}

	// An export audits with no server, against the records and the head.
	dir := t.TempDir()
	export, _, code := ts.cliAs("auditor", "events", "--json")
	if code != 0 {
		t.Fatal("e31 events --json failed")
	}
	logFile, recFile := filepath.Join(dir, "log.jsonl"), filepath.Join(dir, "records.json")
	writeTestFile(t, logFile, export)
	writeTestFile(t, recFile, recsJSON)
	if out, _, code := execute3("audit", "--from", logFile, "--records", recFile, "--since-head", head.String()); code != 0 || !strings.Contains(out, "audit passed") {
		t.Fatalf("e31 audit --from --records --since-head: exit %d\n%s", code, out)
	}
	// Every stop was signed by its node, with the key of the card the
	// dev's operator signed for it: checked against the card key too.
	cards := filepath.Join(ts.dir, "keys", auth.CardsPubFile)
	if out, _, code := execute3("audit", "--from", logFile, "--cards-key", cards); code != 0 ||
		!regexp.MustCompile(`audit passed.*; \d+ stop\(s\) verified as signed by their nodes; chain`).MatchString(out) {
		t.Fatalf("e31 audit --from --cards-key: exit %d\n%s", code, out)
	}

	lines := strings.Split(strings.TrimSpace(export), "\n")
	find := func(job, kind string) (int, uint64) {
		for i, l := range lines {
			var e audit.Exported
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatal(err)
			}
			// Starts and stops end with the node that sent them.
			if e.Subject == "e31.job."+job+"."+kind || strings.HasPrefix(e.Subject, "e31.job."+job+"."+kind+".") {
				return i, e.Seq
			}
		}
		t.Fatalf("no %s event of %s in the export", kind, job)
		return 0, 0
	}
	tampered := func(name string, change func([]string) []string) string {
		copied := change(append([]string(nil), lines...))
		p := filepath.Join(dir, name+".jsonl")
		writeTestFile(t, p, strings.Join(copied, "\n")+"\n")
		return p
	}
	expect := func(file string, want ...string) {
		t.Helper()
		out, _, code := execute3("audit", "--from", file, "--records", recFile, "--since-head", head.String())
		if code != exitFailed {
			t.Errorf("audit of %s: exit %d, want %d\n%s", filepath.Base(file), code, exitFailed, out)
		}
		for _, w := range want {
			if !regexp.MustCompile(w).MatchString(out) {
				t.Errorf("audit of %s does not say %q:\n%s", filepath.Base(file), w, out)
			}
		}
	}

	i, seq := find(failed, "started")
	expect(tampered("deleted", func(l []string) []string { return append(l[:i], l[i+1:]...) }),
		`gap +#`+itoa(seq)+`: message #`+itoa(seq)+` is missing`,
		`chain +#`+itoa(head.Seq)+`: the chain does not pass through`,
		`mismatch +`+failed+` #`+itoa(seq)+`: the record was built from RunStarted`)

	i, seq = find(failed, "stopped")
	expect(tampered("duplicated", func(l []string) []string { return append(l[:i+1], l[i:]...) }),
		`duplicate +`+failed+` #`+itoa(seq)+`: message #`+itoa(seq)+` appears twice`)

	expect(tampered("changed", func(l []string) []string {
		l[i] = strings.Replace(l[i], `"exit_code":3`, `"exit_code":0`, 1)
		return l
	}),
		`mismatch +`+failed+` #`+itoa(seq)+`: RunStopped #`+itoa(seq)+` is not the event the record was built from`,
		`mismatch +`+failed+`: exit_code: ledger has 3, the log gives 0`,
		`chain +#`+itoa(head.Seq)+`: the chain does not pass through`,
		`signature +`+failed+` #`+itoa(seq)+`: the stop of attempt 1 on node node-\d+ does not verify`)

	// A job after the head: changing its events leaves the head standing.
	later := ts.submit(writeJob(t, "work: {command: [\"/bin/sh\", \"-c\", \"exit 4\"]}\nrequest: {cpu: 0.5, memory: 64MiB, limit: 1m}\n", nil))
	ts.wait(later)
	export, _, _ = ts.cliAs("auditor", "events", "--json")
	lines = strings.Split(strings.TrimSpace(export), "\n")
	i, seq = find(later, "stopped")
	if seq <= head.Seq {
		t.Fatalf("the later job's stop #%d is not after the head #%d", seq, head.Seq)
	}
	after := tampered("after-the-head", func(l []string) []string {
		l[i] = strings.Replace(l[i], `"exit_code":4`, `"exit_code":0`, 1)
		return l
	})
	// The head stands (the prefix is untouched); what tells the change is
	// the node's signature over its stop, and that alone.
	out, _, code = execute3("audit", "--from", after, "--since-head", head.String())
	if code != exitFailed || strings.Contains(out, "chain ") || len(regexp.MustCompile(`(?m)^[a-z_]+ +\S+ #`).FindAllString(out, -1)) != 1 ||
		!regexp.MustCompile(`signature +`+later+` #`+itoa(seq)+`: the stop of attempt 1 on node node-\d+ does not verify with the node's key`).MatchString(out) {
		t.Errorf("a change after the head: exit %d, want the head to stand and the stop's signature alone to tell\n%s", code, out)
	}
}

// TestAuditFindsOverlappingHoldsBeyondCapacity: two holds on one node, each
// within its capacity, together beyond it, in a log on a real server.
func TestAuditFindsOverlappingHoldsBeyondCapacity(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	pub := bus.NewPublisher(js, "e31/test", nil)
	spec := events.JobSpec{Work: events.Work{Command: []string{"/bin/true"}}, Request: events.Request{CPU: 1.5, MemoryBytes: 1 << 30, DiskBytes: 3 << 30, LimitSeconds: 60}}
	hold := events.Hold{Attempt: 1, Node: "n1", CPU: 1.5, MemoryBytes: 1 << 30, DiskBytes: 3 << 30}
	appendAll := func(subject string, evs ...events.Event) uint64 {
		var last uint64
		for _, ev := range evs {
			env, err := pub.Append(ctx, subject, ev)
			if err != nil {
				t.Fatal(err)
			}
			last = env.Seq
		}
		return last
	}
	appendAll("n1", &events.NodeAnnounced{Node: "n1", Boot: "b1", CPU: 2, MemoryBytes: 4 << 30, DiskBytes: 4 << 30})
	for _, job := range []string{"first", "second"} {
		appendAll(job, &events.JobRequested{Submitter: "alice", Spec: spec}, &events.JobSubmitted{Submitter: "alice", Spec: spec})
	}
	appendAll("first", &events.ComputeHeld{Hold: hold, Submitter: "alice", Spec: spec})
	over := appendAll("second", &events.ComputeHeld{Hold: hold, Submitter: "alice", Spec: spec})

	export, errOut, code := execute3("events", "--json", "--nats", srv.ClientURL())
	if code != 0 {
		t.Fatalf("e31 events --json: exit %d: %s", code, errOut)
	}
	file := filepath.Join(t.TempDir(), "log.jsonl")
	writeTestFile(t, file, export)
	out, _, code := execute3("audit", "--from", file)
	want := `capacity +second #` + itoa(over) + `: node n1 held beyond its capacity by attempt 1: 3 of 2 cpu, 6442450944 of 4294967296 bytes of disk`
	if code != exitFailed || !regexp.MustCompile(want).MatchString(out) || regexp.MustCompile(`(?m)^[a-z_]+ `).FindAllString(out, -1)[0] != "capacity " ||
		len(regexp.MustCompile(`(?m)^[a-z_]+ +\S+ #`).FindAllString(out, -1)) != 1 {
		t.Fatalf("audit of overlapping holds: exit %d, want one finding %q:\n%s", code, want, out)
	}
}

// TestLedgerTotalsPerSubmitter: what each submitter would be billed for a
// period, through the CLI, from a log with known times.
func TestLedgerTotalsPerSubmitter(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var now time.Time
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return now })
	at := func(d time.Duration) { now = day.Add(d) }
	life := func(job, who string, h events.Hold, from, to time.Duration) {
		spec := events.JobSpec{Work: events.Work{Command: []string{"/bin/true"}},
			Request: events.Request{CPU: h.CPU, MemoryBytes: h.MemoryBytes, GPU: h.GPU, LimitSeconds: 86400}}
		at(from)
		for _, ev := range []events.Event{&events.JobRequested{Submitter: who, Spec: spec}, &events.JobSubmitted{Submitter: who, Spec: spec},
			&events.ComputeHeld{Hold: h, Submitter: who, Spec: spec}, &events.RunStopped{Hold: h, Outcome: events.Succeeded},
			&events.OutputReturned{Hold: h, Outcome: events.Succeeded}} {
			if _, err := pub.Append(ctx, job, ev); err != nil {
				t.Fatal(err)
			}
		}
		at(to)
		if _, err := pub.Append(ctx, job, &events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true}); err != nil {
			t.Fatal(err)
		}
	}
	hold := func(cpu float64, gib int64, gpu int) events.Hold {
		return events.Hold{Attempt: 1, Node: "n1", CPU: cpu, MemoryBytes: gib << 30, GPU: gpu}
	}
	// November 30th to December 2nd; the bill is for December 1st.
	life("a-1", "alice", hold(2, 4, 0), 23*time.Hour, 25*time.Hour) // one hour in it
	life("a-2", "alice", hold(1, 1, 1), 30*time.Hour, 30*time.Hour+30*time.Minute)
	life("b-1", "bob", hold(4, 8, 2), 47*time.Hour, 49*time.Hour) // one hour in it
	life("b-2", "bob", hold(4, 8, 0), 50*time.Hour, 51*time.Hour) // after it

	svc, err := ledger.New(srv.Conn(t), js, ledger.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ledger: %v", err)
		}
	})
	<-svc.CaughtUp()

	out, errOut, code := execute3("ledger", "--totals", "--json", "--since", "2026-12-01", "--until", "2026-12-02", "--nats", srv.ClientURL())
	if code != 0 {
		t.Fatalf("e31 ledger --totals: exit %d: %s", code, errOut)
	}
	var got []wire.Totals
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := []wire.Totals{
		{Submitter: "alice", Jobs: 2, Attempts: 2, HeldSeconds: 5400, CPUCoreSeconds: 2*3600 + 1800, MemoryGiBSeconds: 4*3600 + 1800, GPUSeconds: 1800},
		{Submitter: "bob", Jobs: 1, Attempts: 1, HeldSeconds: 3600, CPUCoreSeconds: 4 * 3600, MemoryGiBSeconds: 8 * 3600, GPUSeconds: 2 * 3600},
	}
	if g, w := mustMarshal(t, got), mustMarshal(t, want); g != w {
		t.Errorf("totals for December 1st:\n%s\nwant\n%s", g, w)
	}
	out, _, code = execute3("ledger", "--totals", "--csv", "--submitter", "bob", "--nats", srv.ClientURL())
	if want := "submitter,jobs,attempts,held_seconds,cpu_core_seconds,memory_gib_seconds,gpu_seconds,open,lost_seconds\nbob,2,2,10800,43200,86400,14400,0,0\n"; code != 0 || out != want {
		t.Errorf("bob's totals, all time, as CSV: exit %d\n%s\nwant\n%s", code, out, want)
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestAuditWritesTheProfileBenchAsksFor: `e31 bench ledger --cpuprofile`
// profiles e31 audit, run in a process of its own, through its hidden
// --cpuprofile; the audit must still do its work, and the profile must be
// there for pprof when it exits.
func TestAuditWritesTheProfileBenchAsksFor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file, prof := filepath.Join(dir, "log.jsonl"), filepath.Join(dir, "audit.prof")
	writeTestFile(t, file, "")
	out, errOut, code := execute3("audit", "--from", file, "--cpuprofile", prof)
	if code != 0 || !strings.Contains(out, "audit passed") {
		t.Fatalf("e31 audit --cpuprofile: exit %d: %s%s", code, out, errOut)
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	// runtime/pprof writes a gzipped protocol buffer.
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("the profile is not one pprof reads: %d bytes, %q…", len(b), b[:min(len(b), 8)])
	}
	if _, _, code := execute3("audit", "--from", file, "--cpuprofile", filepath.Join(dir, "no", "such", "dir")); code == 0 {
		t.Error("a profile that cannot be written was not an error")
	}
}

// TestAuditWithAnAuditorsCredentialsOfBefore: credentials an auditor was
// issued before e31 audit read the ledger's bucket do not allow it. The
// audit says so at once, and how to mend it, rather than timing out on a
// request the server drops.
func TestAuditWithAnAuditorsCredentialsOfBefore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := startSystem(t, dir, 1)
	keys, err := auth.LoadKeys(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	// The auditor's permissions of before: nothing of the ledger's bucket.
	perms, err := auth.Permissions(auth.Identity{Role: auth.Auditor, Name: auth.AuditorName})
	if err != nil {
		t.Fatal(err)
	}
	bucket := events.KVStream(events.LedgerBucket)
	perms.Pub.Allow = slices.DeleteFunc(perms.Pub.Allow, func(s string) bool { return strings.Contains(s, bucket) })
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	userKey, err := user.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.NewUserClaims(userKey)
	claims.Name, claims.IssuerAccount, claims.Permissions = auth.AuditorName, keys.AccountOf(auth.Auditor), perms
	claims.Tags.Add("e31-role:" + string(auth.Auditor))
	token, err := claims.Encode(keys.AccountSigning)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "auditor-of-before.creds")
	if err := (auth.Creds{JWT: token, Seed: seed}).WriteFile(old); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := execute([]string{"audit", "--nats", ts.url, "--creds", old, "--log-level", "warn"}, &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "not permitted") || !strings.Contains(errOut.String(), "e31 creds user --role auditor") {
		t.Errorf("e31 audit with an auditor's credentials of before: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}
