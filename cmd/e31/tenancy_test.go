package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/client"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// The tests in this file check tenancy with authentication on, through the
// same CLI and services users get: each submitter sees only its own, each
// service may do only its job, the auditor reads and changes nothing.

// TestAliceCannotSeeOrCancelBobsJob: whatever alice asks about bob's job,
// it does not exist for her; her cancel of it is refused by the server
// under bob's name and ignored under her own.
func TestAliceCannotSeeOrCancelBobsJob(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	job := writeJob(t, `
work: {command: ["/bin/sh", "-c", "echo secret > $E31_OUTPUT/s.txt; sleep 2"]}
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
output: [s.txt]
`, nil)
	out, errOut, code := ts.cliAs("bob", "submit", "--quiet", job)
	if code != 0 {
		t.Fatalf("bob's submit: exit %d: %s", code, errOut)
	}
	bobs := strings.TrimSpace(out)
	alices := ts.submit(job)
	ts.waitState(bobs, hold.StateRunning)

	noSuchJob := func(what string, args ...string) {
		t.Helper()
		out, errOut, code := ts.cli(args...)
		if code == 0 || !strings.Contains(errOut, "no such job") || strings.Contains(out, "secret") {
			t.Errorf("alice: e31 %s (%s): exit %d, %q %q; want no such job", strings.Join(args, " "), what, code, out, errOut)
		}
	}
	noSuchJob("status", "status", bobs)
	noSuchJob("the record", "ledger", bobs, "--json")
	noSuchJob("the events", "events", bobs, "--json")
	noSuchJob("waiting", "wait", "--timeout", "10s", bobs)
	noSuchJob("the output", "output", bobs, "-o", t.TempDir())
	noSuchJob("a cancel", "cancel", bobs)

	// Her records and totals are hers alone; she may not ask for bob's.
	out, _, code = ts.cli("ledger", "--json")
	var recs []hold.HoldRecord
	if err := json.Unmarshal([]byte(out), &recs); err != nil || code != 0 || len(recs) != 1 || recs[0].Job != alices {
		t.Errorf("alice's records: exit %d, %v: %s; want her job alone", code, err, out)
	}
	for _, args := range [][]string{{"ledger", "--submitter", "bob"}, {"ledger", "--totals", "--submitter", "bob"}} {
		if _, errOut, code := ts.cli(args...); code != exitUsage || !strings.Contains(errOut, "own") {
			t.Errorf("alice: e31 %s: exit %d %q, want refused", strings.Join(args, " "), code, errOut)
		}
	}
	// The whole log and the audit are the auditor's.
	for _, args := range [][]string{{"events"}, {"audit"}} {
		if _, errOut, code := ts.cli(args...); code != exitUsage || !strings.Contains(errOut, "not permitted") {
			t.Errorf("alice: e31 %s: exit %d %q, want not permitted", strings.Join(args, " "), code, errOut)
		}
	}

	// Behind the CLI: a cancel under bob's name is refused by the server;
	// under her own it is logged and ignored.
	alice := ts.client("alice")
	cancelAsBob := events.New(bobs, &events.CancelRequested{By: "bob"}, "alice", time.Now())
	if err := refusedPublish(t, alice, cancelAsBob); err != nil {
		t.Error(err)
	}
	if _, err := alice.Append(context.Background(), bobs, &events.CancelRequested{By: "alice"}); err != nil {
		t.Fatalf("alice's cancel under her own name: %v", err)
	}
	// Nor can she reach bob's data: his bucket is not hers to open.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := alice.JetStream().ObjectStore(sctx, events.DataBucketFor("bob")); err == nil {
		t.Error("alice opened bob's data bucket")
	}

	rec, code := ts.waitAs("bob", bobs)
	if code != 0 || rec.Outcome != events.Succeeded {
		t.Errorf("bob's job after alice's cancel: %s (%s), want succeeded", rec.Outcome, rec.Reason)
	}
	if rec, _ := ts.wait(alices); rec.Outcome != events.Succeeded {
		t.Errorf("alice's own job: %s (%s)", rec.Outcome, rec.Reason)
	}
	// Bob sees his own: status, events, output.
	if out, _, code := ts.cliAs("bob", "status", bobs); code != 0 || !strings.Contains(out, "released") {
		t.Errorf("bob's status of his job: exit %d %q", code, out)
	}
	if out, _, code := ts.cliAs("bob", "events", bobs); code != 0 || !strings.Contains(out, "CancelRequested") || !strings.Contains(out, "ComputeReleased") {
		t.Errorf("bob's events of his job: exit %d\n%s", code, out)
	}
	if _, errOut, code := ts.cliAs("bob", "output", bobs, "-o", t.TempDir(), "--quiet"); code != 0 {
		t.Errorf("bob's output: exit %d %s", code, errOut)
	}
}

// TestASubmitterCannotPublishTheMoneyEvents: the events that start and stop
// the meter are refused by the server when a submitter publishes them, even
// about its own job.
func TestASubmitterCannotPublishTheMoneyEvents(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	id := ts.submit(writeJob(t, "work: {command: [/bin/true]}\nrequest: {limit: 1m, cpu: 0.1}\n", nil))
	ts.wait(id)
	hold := events.Hold{Attempt: 9, Node: "node-1", CPU: 0.1, MemoryBytes: 1 << 20}
	alice := ts.client("alice")
	for _, ev := range []events.Event{
		&events.ComputeHeld{Hold: hold, Submitter: "alice"},
		&events.ComputeReleased{Hold: hold, Outcome: events.Succeeded, Final: true},
	} {
		_, err := alice.Append(context.Background(), id, ev)
		if !errors.Is(err, client.ErrNotPermitted) {
			t.Errorf("alice appending %s: %v, want not permitted", events.Name(ev.Type()), err)
		}
		if err := refusedPublish(t, alice, events.New(id, ev, "alice", time.Now())); err != nil {
			t.Error(err)
		}
	}
	// The job's log is as the services left it.
	if k := strings.Join(ts.kinds(id), ","); strings.Count(k, "ComputeHeld") != 1 || strings.Count(k, "ComputeReleased") != 1 {
		t.Errorf("events %s: a submitter's hold or release got in", k)
	}
}

// TestAServiceCannotPublishAnotherServicesEvents: each service connects as
// itself (as e31 dev's services do) and is refused the events of others.
func TestAServiceCannotPublishAnotherServicesEvents(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	hold := events.Hold{Attempt: 1, Node: "node-1", CPU: 0.1, MemoryBytes: 1 << 20}
	for _, c := range []struct {
		service, name string
		ev            events.Event
	}{
		{auth.RunService, "node-1", &events.ComputeReleased{Hold: hold, Outcome: events.Succeeded, Final: true}},
		{auth.SubmitService, "submit", &events.ComputeHeld{Hold: hold, Submitter: "alice"}},
		{auth.ReleaseService, "release", &events.ComputeHeld{Hold: hold, Submitter: "alice"}},
		{auth.RentService, "rent-1", &events.RunStopped{Hold: hold, Outcome: events.Succeeded}},
		{auth.OutputService, "output", &events.JobSubmitted{Submitter: "alice"}},
		{auth.LedgerService, "ledger", &events.JobRejected{Reason: "the ledger writes nothing"}},
		{auth.RunService, "node-1", &events.NodeAnnounced{Node: "node-2", Boot: "b"}},
	} {
		id := auth.Identity{Role: auth.Service, Service: c.service, Name: c.name}
		nc, err := ts.sys.Connect(id, "test-"+c.name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		subject := "svc-job"
		if n, ok := c.ev.(*events.NodeAnnounced); ok {
			subject = n.Node
		}
		if err := refusedPublishConn(t, nc, events.New(subject, c.ev, c.name, time.Now())); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
}

// TestTheAuditorReadsEverythingAndChangesNothing.
func TestTheAuditorReadsEverythingAndChangesNothing(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	job := writeJob(t, "work: {command: [/bin/true]}\nrequest: {limit: 1m, cpu: 0.1}\n", nil)
	alices := ts.submit(job)
	out, _, code := ts.cliAs("bob", "submit", "--quiet", job)
	if code != 0 {
		t.Fatal("bob's submit failed")
	}
	bobs := strings.TrimSpace(out)
	ts.wait(alices)
	ts.waitAs("bob", bobs)

	out, _, code = ts.cliAs("auditor", "ledger", "--json")
	var recs []hold.HoldRecord
	if err := json.Unmarshal([]byte(out), &recs); err != nil || code != 0 || len(recs) != 2 {
		t.Errorf("the auditor's records: exit %d, %v, %d records; want both jobs", code, err, len(recs))
	}
	if out, _, code := ts.cliAs("auditor", "events", "--json"); code != 0 || !strings.Contains(out, bobs) || !strings.Contains(out, alices) {
		t.Errorf("the auditor reading the whole log: exit %d", code)
	}
	if out, _, code := ts.cliAs("auditor", "audit"); code != 0 || !strings.Contains(out, "audit passed") {
		t.Errorf("the auditor's audit: exit %d\n%s", code, out)
	}
	if out, _, code := ts.cliAs("auditor", "status", bobs); code != 0 || !strings.Contains(out, "released") {
		t.Errorf("the auditor's status of bob's job: exit %d %q", code, out)
	}
	// It may change nothing: not submit, not cancel, not publish an event.
	if _, errOut, code := ts.cliAs("auditor", "submit", "--quiet", job); code != exitUsage || !strings.Contains(errOut, "not permitted") {
		t.Errorf("the auditor submitting: exit %d %q, want not permitted", code, errOut)
	}
	auditor := ts.client("auditor")
	for _, ev := range []events.Event{
		&events.CancelRequested{By: auth.AuditorName},
		&events.ComputeReleased{Hold: events.Hold{Attempt: 2, Node: "node-1"}, Final: true},
		&events.JobRejected{Reason: "audited"},
	} {
		if err := refusedPublish(t, auditor, events.New(bobs, ev, "auditor", time.Now())); err != nil {
			t.Error(err)
		}
	}
}

// refusedPublish publishes env to JetStream as c and returns an error
// unless the server refused it: the publish fails, and the server's
// permissions violation names the event's subject.
func refusedPublish(t *testing.T, c *client.Client, env events.Envelope) error {
	t.Helper()
	m, err := env.Msg()
	if err != nil {
		t.Fatal(err)
	}
	ctx, done := c.Guard(context.Background(), m.Subject)
	defer done()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.JetStream().PublishMsg(ctx, m); err == nil {
		return errors.New("published " + events.Name(env.Type) + " on " + m.Subject)
	}
	return refusal(context.Cause(ctx), m.Subject)
}

// refusedPublishConn is refusedPublish on a plain connection.
func refusedPublishConn(t *testing.T, nc *nats.Conn, env events.Envelope) error {
	t.Helper()
	m, err := env.Msg()
	if err != nil {
		t.Fatal(err)
	}
	// A core publish: the server refuses it before it answers the flush.
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return refusal(nc.LastError(), m.Subject)
}

func refusal(err error, subject string) error {
	if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"`+subject+`"`) {
		return errors.New("publishing on " + subject + ": " + errString(err) + ", want a permissions violation")
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestCredsMakeIdentitiesOffline: the keys, a submitter's and a node's
// credentials, made with no server, say who they are and what they may do.
func TestCredsMakeIdentitiesOffline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := dir + "/keys"
	if out, errOut, code := execute3("creds", "init", "--dir", keys); code != 0 || !strings.Contains(out, "made the keys") {
		t.Fatalf("creds init: exit %d: %s %s", code, out, errOut)
	}
	if out, _, code := execute3("creds", "init", "--dir", keys); code != 0 || !strings.Contains(out, "kept the keys") {
		t.Errorf("creds init again: exit %d: %s", code, out)
	}
	carol := dir + "/carol.creds"
	if _, errOut, code := execute3("creds", "user", "--dir", keys, "--role", "submitter", "--name", "carol", "-o", carol); code != 0 {
		t.Fatalf("creds user: exit %d: %s", code, errOut)
	}
	out, _, code := execute3("creds", "show", carol)
	if code != 0 || !strings.Contains(out, "submitter carol") || !strings.Contains(out, "e31.job.*.requested.carol") ||
		!strings.Contains(out, "subscribe: _INBOX_submitter_carol.>") || strings.Contains(out, "$JS.API.STREAM.INFO.E31 ") {
		t.Errorf("creds show of a submitter:\n%s", out)
	}
	node := dir + "/node-4.creds"
	if _, errOut, code := execute3("creds", "user", "--dir", keys, "--role", "service", "--service", "run", "--name", "node-4", "--expires", "24h", "-o", node); code != 0 {
		t.Fatalf("creds user of a node: exit %d: %s", code, errOut)
	}
	if out, _, _ := execute3("creds", "show", node); !strings.Contains(out, "e31.node.node-4.announced") || !strings.Contains(out, "expires") {
		t.Errorf("creds show of a node:\n%s", out)
	}
	for _, args := range [][]string{
		{"creds", "user", "--dir", keys, "--role", "submitter", "--name", "operator", "-o", dir + "/x.creds"},
		{"creds", "user", "--dir", keys, "--role", "service", "--service", "billing", "--name", "b", "-o", dir + "/x.creds"},
		{"creds", "user", "--dir", dir + "/none", "--role", "submitter", "--name", "dan", "-o", dir + "/x.creds"},
	} {
		if _, _, code := execute3(args...); code != exitUsage {
			t.Errorf("e31 %s: exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
	}
}
