package main

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/events"
)

// garbageOn publishes, as who with nothing but a plain nats.go client and
// its own credentials, everything it may publish on its own tail of job's
// subjects: junk, events that do not belong there, a second request, and
// events whose Nats-Msg-Id is that of what e31's services will append to
// the job next.
func (ts *testSystem) garbageOn(job, who string) {
	ts.t.Helper()
	js := ts.client(who).JetStream()
	ctx := ctxTimeout(ts.t, 30*time.Second)
	publish := func(subject string, body []byte, h nats.Header) {
		m := nats.NewMsg(subject)
		m.Data = body
		for k, vs := range h {
			m.Header[k] = vs
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			ts.t.Fatalf("%s publishing on %s: %v", who, subject, err)
		}
	}
	base := "e31.job." + job + "."
	publish(base+"requested."+who, []byte("{not json"), nil)
	publish(base+"cancel."+who, []byte("junk"), nil)
	publish(base+"delete."+who, []byte(`{"what":"all"}`), nats.Header{"ce-type": {events.TypeDeleteRequested}})
	for _, id := range []string{"submitted", "held/1", "started/1", "stopped/1", "returned/1", "released/1"} {
		publish(base+"requested."+who, []byte("{}"), nats.Header{nats.MsgIdHdr: {job + "/" + id}})
	}
	for _, ev := range []events.Event{
		&events.JobRejected{Reason: who + " says so"},
		&events.JobRequested{Submitter: who, Spec: events.JobSpec{Work: events.Work{Command: []string{"/bin/false"}}}},
	} {
		env := events.New(job, ev, who, time.Now())
		env.ID += "/" + who
		m, err := env.Msg()
		if err != nil {
			ts.t.Fatal(err)
		}
		publish(base+"requested."+who, m.Data, m.Header)
	}
}

// TestAnotherTenantsGarbageChangesNothing: bob publishes every kind of
// garbage he may on alice's job, before it is held, while it runs and
// after it ended. Her job succeeds, the audit passes, and however often
// she reads its events, the log's consumers are as many as before.
func TestAnotherTenantsGarbageChangesNothing(t *testing.T) {
	t.Parallel()
	ts := startSystem(t, t.TempDir(), 1)
	ctx := ctxTimeout(t, 2*time.Minute)
	stream, err := ts.c.JetStream().Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	consumers := func() int {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}

	id := ts.submit(writeJob(t, `
work: {command: ["/bin/sh", "-c", "sleep 1; echo done > $E31_OUTPUT/x"]}
request: {cpu: 0.5, memory: 32MiB, limit: 1m}
output: [x]
`, nil))
	ts.garbageOn(id, "bob")
	ts.waitState(id, "running")
	ts.garbageOn(id, "bob")
	rec, code := ts.wait(id)
	if code != 0 || rec.Outcome != events.Succeeded || rec.Submitter != "alice" || rec.Output.Files != 1 {
		t.Fatalf("alice's job after bob's garbage: exit %d, %s (%s), submitter %s, %d files", code, rec.Outcome, rec.Reason, rec.Submitter, rec.Output.Files)
	}
	ts.garbageOn(id, "bob")
	// Empty messages with a Status header: nats.go's consumers take them
	// for statuses of the server's. Every service and the ledger read past
	// them: alice's next job succeeds, and its record is served.
	for _, status := range []string{"100", "404", "408", "409", "503"} {
		m := nats.NewMsg("e31.job." + id + ".delete.bob")
		m.Header.Set("Status", status)
		m.Header.Set("Description", "Consumer Deleted")
		if _, err := ts.client("bob").JetStream().PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	next := ts.submit(writeJob(t, "work: {command: [/bin/true]}\nrequest: {limit: 1m, cpu: 0.1}\n", nil))
	if rec, code := ts.wait(next); code != 0 {
		t.Fatalf("alice's next job after bob's forged statuses: exit %d, %s (%s)", code, rec.Outcome, rec.Reason)
	}

	before := consumers()
	for i := range 200 {
		if _, errOut, code := ts.cli("events", "--json", id); code != 0 {
			t.Fatalf("e31 events #%d: exit %d: %s", i, code, errOut)
		}
	}
	if after := consumers(); after != before {
		t.Errorf("the log has %d consumers after 200 reads of a job's events, %d before", after, before)
	}
	out, _, code := ts.cliAs("auditor", "audit")
	if code != 0 {
		t.Fatalf("audit after bob's garbage:\n%s", out)
	}
	t.Log(out)
}
