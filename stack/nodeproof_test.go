package stack

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/audit"
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/jobfile"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/nodecard"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/run/executor"
)

// liar is a compromised node's executor: it runs jobs as plain processes
// and says they were sandboxed, and reports a day of cpu time for each.
// Its memory figure it makes small: a plain process's peak includes the
// node's own (the process executor's is not a job's), and the test is of
// the cpu.
type liar struct{ *executor.Process }

func (liar) Isolation() events.Isolation                { return events.IsolationSandbox }
func (liar) IsolationOf(executor.Spec) events.Isolation { return events.IsolationSandbox }
func (l liar) Prepare(ctx context.Context, spec executor.Spec) (executor.Job, error) {
	j, err := l.Process.Prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	return liarJob{j}, nil
}

type liarJob struct{ executor.Job }

func (j liarJob) Run(ctx context.Context) (executor.Result, error) {
	r, err := j.Job.Run(ctx)
	r.Usage.CPUSeconds, r.Usage.MaxRSSBytes = 86400, 1<<20
	return r, err
}

// TestTheAuditNamesANodesForgedUsage: a whole e31 whose one node reports
// usage its hold could not contain. The node is carded and signs its stop
// as any node does, so the signature verifies: the lie is the node's own,
// and what gives it away is the hold. The ledger's record flags it, and
// the audit, given the operator's card key, names it and nothing else.
func TestTheAuditNamesANodesForgedUsage(t *testing.T) {
	t.Parallel()
	ctx := natstest.Context(t, 2*time.Minute)
	proc, err := executor.NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Sync: "interval", Nodes: 1, Users: []string{"alice"},
		Node: run.Config{CPU: 1, MemoryBytes: 256 << 20, DiskBytes: 256 << 20, Executor: liar{proc}, Grace: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	alice, err := client.Connect(ctx, client.Config{URL: s.Broker().ClientURL(), Creds: s.CredsFile("alice")})
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	spec, err := jobfile.Parse("job.yaml", []byte("work: {command: [/bin/true]}\nrequest: {cpu: 0.5, memory: 64MiB, disk: 1MiB, limit: 30s}\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id, err := alice.Submit(ctx, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := alice.Wait(ctx, id, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Flags) != 1 || !strings.Contains(rec.Flags[0], "usage_beyond_hold: cpu_seconds 86400 > 0.5 cpu") {
		t.Errorf("the record's flags %q, want the day of cpu named", rec.Flags)
	}
	if a := rec.Attempts[0]; a.Signature == "" || a.SigningKey == "" {
		t.Errorf("the record carries no signature: %+v", a)
	}

	auditor, err := client.Connect(ctx, client.Config{URL: s.Broker().ClientURL(), Creds: s.CredsFile("auditor")})
	if err != nil {
		t.Fatal(err)
	}
	defer auditor.Close()
	key, err := nodecard.ReadPublic(s.CardsKeyFile())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(s.CardsKeyFile()) != "cards.pub" {
		t.Errorf("the card key is at %s", s.CardsKeyFile())
	}
	auditor.SetCardsKey(key)
	rep, err := auditor.Audit(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != audit.UsageBeyondHold || rep.Findings[0].Job != id {
		t.Fatalf("findings %+v, want the usage beyond the hold of %s alone", rep.Findings, id)
	}
	if rep.StopsVerified != 1 || rep.CardsKey != nodecard.KeyText(key) {
		t.Errorf("stops verified %d against %q, want the one stop against the stack's card key", rep.StopsVerified, rep.CardsKey)
	}
}
