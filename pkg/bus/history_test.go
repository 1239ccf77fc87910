package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// junk publishes what any tenant may publish on its own tail of any job's
// subjects, with a plain client: each kind of garbage a reader must pass
// over without losing count of where the job's log is.
func junk(t *testing.T, ctx context.Context, js jetstream.JetStream, job, who string, withStatus bool) int {
	t.Helper()
	var msgs []*nats.Msg
	add := func(subject string, body []byte, h nats.Header) {
		m := nats.NewMsg(subject)
		m.Data = body
		for k, vs := range h {
			m.Header[k] = vs
		}
		msgs = append(msgs, m)
	}
	add("e31.job."+job+".requested."+who, []byte("not json at all"), nil)
	// What it tells the server of its message must not follow a copy of
	// it to the poison stream.
	add("e31.job."+job+".cancel."+who, []byte(`{"by":"`+who+`"}`), nats.Header{"ce-type": {"e31.job.cancel_requested.v1"},
		"Nats-Expected-Stream": {events.Stream}})
	// A status header of its own, and no body: a reader that took it for
	// the server's end of batch would stop before the job's last message.
	// (nats.go's consumers take such a message for a status of theirs and
	// never hand it over; see TestReplayReadsPastAForgedStatus.)
	if withStatus {
		add("e31.job."+job+".delete."+who, nil, nats.Header{"Status": {"204"}, "Description": {"EOB"}})
		add("e31.job."+job+".delete."+who, nil, nats.Header{"Status": {"503"}})
	}
	// A well-formed event of a type that does not belong on that subject,
	// whose Nats-Msg-Id is the id of the hold RENT would append next: the
	// server's duplicate window would take the real hold for a repeat.
	held := events.New(job, &events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1}}, "mallory", at)
	m, err := held.Msg()
	if err != nil {
		t.Fatal(err)
	}
	add("e31.job."+job+".requested."+who, m.Data, m.Header)
	for _, m := range msgs {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish junk on %s: %v", m.Subject, err)
		}
	}
	return len(msgs)
}

func TestReactExpectsTheJobsTrueLastSequence(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })

	trigger, err := pub.Append(ctx, "victim", submitted())
	if err != nil {
		t.Fatal(err)
	}
	n := junk(t, ctx, js, "victim", "mallory", true)
	held := events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 1 << 20}, Submitter: "alice"}
	stored, err := pub.React(ctx, trigger, func(after []events.Envelope) ([]events.Event, error) {
		if len(after) != 0 {
			return nil, fmt.Errorf("decided from %d events after the trigger; junk is no event", len(after))
		}
		return []events.Event{&held}, nil
	})
	if err != nil {
		t.Fatalf("react with junk after the trigger: %v", err)
	}
	if len(stored) != 1 || stored[0].Seq != trigger.Seq+uint64(n)+1 {
		t.Fatalf("stored %+v, want the hold right after the %d junk messages", stored, n)
	}
	h, err := bus.ReadHistory(ctx, js, "victim", 1)
	if err != nil {
		t.Fatal(err)
	}
	if h.Last != stored[0].Seq || h.SetAside != n || len(h.Events) != 2 {
		t.Errorf("history: last #%d, %d set aside, %d events; want #%d, %d, 2", h.Last, h.SetAside, len(h.Events), stored[0].Seq, n)
	}
}

func TestStoredGivesMessagesAsTheyWereStored(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)

	m := nats.NewMsg("e31.job.j1.cancel.mallory")
	m.Data = []byte("x")
	// Headers of the names the server adds to a direct get's answer: the
	// publisher's own stay, the server's go.
	m.Header.Set(jetstream.SequenceHeader, "999")
	m.Header.Set("ce-id", "j1/cancel")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// More than one batch of another job's messages in between, and more
	// than one batch of this job's after.
	for i := range 300 {
		if _, err := js.Publish(ctx, "e31.job.other.cancel.x", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "e31.job.j1.cancel.y", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []*jetstream.RawStreamMsg
	for m, err := range bus.Stored(ctx, js, events.JobSubject("j1"), 1) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if len(got) != 301 {
		t.Fatalf("read %d messages of j1, want 301", len(got))
	}
	first := got[0]
	if first.Sequence != 1 || first.Subject != "e31.job.j1.cancel.mallory" || string(first.Data) != "x" {
		t.Errorf("first = #%d %s %q", first.Sequence, first.Subject, first.Data)
	}
	want := nats.Header{jetstream.SequenceHeader: {"999"}, "ce-id": {"j1/cancel"}}
	if fmt.Sprint(first.Header) != fmt.Sprint(want) {
		t.Errorf("headers = %v, want %v as published", first.Header, want)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Sequence <= got[i-1].Sequence || got[i].Subject != "e31.job.j1.cancel.y" {
			t.Fatalf("message %d: #%d %s after #%d", i, got[i].Sequence, got[i].Subject, got[i-1].Sequence)
		}
	}
	// Stopping early is allowed, and a job without messages has none.
	for _, err := range bus.Stored(ctx, js, events.JobSubject("j1"), 1) {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	for m, err := range bus.Stored(ctx, js, events.JobSubject("nobody"), 1) {
		t.Fatalf("a job without messages yielded %v, %v", m, err)
	}
}

// Thousands of reads and conflicts leave nothing behind on the server: the
// stream's consumer count is where it was.
func TestReadsLeaveNoConsumerBehind(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 2*time.Minute)
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })
	stream, err := js.Stream(ctx, events.Stream)
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
	before := consumers()

	trigger, err := pub.Append(ctx, "busy", submitted())
	if err != nil {
		t.Fatal(err)
	}
	junk(t, ctx, js, "busy", "mallory", true)
	for i := range 2000 {
		if _, err := bus.ReadHistory(ctx, js, "busy", 1); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	// Each of these conflicts once (the junk came after the trigger) and
	// reads the history to decide again.
	for i := range 500 {
		_, err := pub.React(ctx, trigger, func(after []events.Envelope) ([]events.Event, error) {
			for _, e := range after {
				if _, done := e.Event.(*events.JobRejected); done {
					return nil, nil
				}
			}
			return []events.Event{&events.JobRejected{Reason: "test"}}, nil
		})
		if err != nil {
			t.Fatalf("react %d: %v", i, err)
		}
		if i%10 == 0 {
			if _, err := bus.Owner(ctx, js, "busy"); err != nil {
				t.Fatalf("owner %d: %v", i, err)
			}
		}
	}
	if after := consumers(); after != before {
		t.Errorf("the stream has %d consumers after the reads, %d before", after, before)
	}
}

func TestOwnerIsWhoeverRequestedFirst(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })

	// Junk on the job's other subjects before its request says nothing of
	// whose it is; nor does a later request, well-formed or not.
	if _, err := js.Publish(ctx, "e31.job.j.cancel.mallory", []byte("junk")); err != nil {
		t.Fatal(err)
	}
	// nats.go's GetMsg takes this one for "no responders".
	forged := nats.NewMsg("e31.job.j.delete.mallory")
	forged.Header.Set("Status", "503")
	if _, err := js.PublishMsg(ctx, forged); err != nil {
		t.Fatal(err)
	}
	req := events.JobRequested{Submitter: "alice", Spec: submitted().Spec}
	if _, err := pub.Append(ctx, "j", &req); err != nil {
		t.Fatal(err)
	}
	junk(t, ctx, js, "j", "mallory", true)
	env := events.New("j", &events.JobRequested{Submitter: "mallory", Spec: submitted().Spec}, "mallory", at)
	env.ID = "j/requested/again" // past the duplicate window, or another id
	if _, err := pub.AppendEnvelope(ctx, env); err != nil {
		t.Fatal(err)
	}
	owner, err := bus.Owner(ctx, js, "j")
	if err != nil || owner != "alice" {
		t.Errorf("owner = %q, %v; want alice", owner, err)
	}
	if _, err := bus.Owner(ctx, js, "none"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("owner of a job with no events: err = %v, want ErrMsgNotFound", err)
	}
}

func TestAForgedMessageIDKeepsNoEventOut(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })

	sub, err := pub.Append(ctx, "j", submitted())
	if err != nil {
		t.Fatal(err)
	}
	forged := nats.NewMsg("e31.job.j.cancel.mallory")
	forged.Data = []byte("{}")
	forged.Header.Set(nats.MsgIdHdr, "j/held/1")
	ack, err := js.PublishMsg(ctx, forged)
	if err != nil {
		t.Fatal(err)
	}
	held := events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1}, Submitter: "alice"}
	stored, errs := pub.AppendBatch(ctx, []bus.Pending{{Subject: "j", Event: &held, Expect: ack.Sequence, ExpectSet: true}})
	if errs[0] != nil || stored[0].Seq <= ack.Sequence {
		t.Fatalf("hold after a forged id: #%d, %v; want it stored after #%d", stored[0].Seq, errs[0], ack.Sequence)
	}
	// Stored once: a repeat is a real duplicate, a conflict with the
	// expectation it no longer meets.
	if _, errs := pub.AppendBatch(ctx, []bus.Pending{{Subject: "j", Event: &held, Expect: ack.Sequence, ExpectSet: true}}); !errors.Is(errs[0], bus.ErrConflict) {
		t.Errorf("the hold appended again: err = %v, want ErrConflict", errs[0])
	}
	evs, err := bus.ReadJob(ctx, js, "j", sub.Seq)
	if err != nil || len(evs) != 2 {
		t.Errorf("job has %d events (%v), want the submission and one hold", len(evs), err)
	}
}

// nats.go's consumers take an empty message with a Status header for one
// of their own statuses and never hand it over; an ordered consumer then
// starts again before it, for ever. Replay reads past it.
func TestReplayReadsPastAForgedStatus(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })

	if _, err := pub.Append(ctx, "a", submitted()); err != nil {
		t.Fatal(err)
	}
	for _, status := range []string{"100", "404", "409", "503"} {
		m := nats.NewMsg("e31.job.v.delete.mallory")
		m.Header.Set("Status", status)
		m.Header.Set("Description", "Consumer Deleted")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	last, err := pub.Append(ctx, "b", submitted())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, filters := range [][]string{nil, {events.JobSubjects}} {
		got = got[:0]
		read, err := bus.Replay(ctx, js, bus.ReplayOptions{Filters: filters}, func(env events.Envelope) error {
			got = append(got, env.Subject)
			return nil
		})
		if err != nil || read != last.Seq || fmt.Sprint(got) != "[a b]" {
			t.Errorf("replay %v: read to #%d, events %v, err %v; want to #%d, [a b]", filters, read, got, err, last.Seq)
		}
	}
}

// TestTheFirstRequestIsReadWhateverItIs: a first request that is an empty
// message with a 503 Status header (nats.go's GetMsg says "no responders"
// for ever) is read as the message it is.
func TestTheFirstRequestIsReadWhateverItIs(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	forged := nats.NewMsg("e31.job.mine.requested.mallory")
	forged.Header.Set("Status", "503")
	ack, err := js.PublishMsg(ctx, forged)
	if err != nil {
		t.Fatal(err)
	}
	m, err := bus.FirstRequest(ctx, js, "mine")
	if err != nil || m.Sequence != ack.Sequence {
		t.Fatalf("first request: %v, %v; want #%d", m, err, ack.Sequence)
	}
	if owner, err := bus.Owner(ctx, js, "mine"); err != nil || owner != "mallory" {
		t.Errorf("owner = %q, %v; want mallory", owner, err)
	}
}

// A job's history is read without asking the server for more messages than
// the job has: a batch that asks for more makes it look for the next one
// to the end of the log, block after block. Every direct get request is
// watched on its subject: the batches asked for add up to the job's
// messages plus the one that counted them, whatever the junk, however
// many batches it takes, and from wherever the read starts.
func TestAJobsHistoryIsReadWithoutLookingPastIt(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })

	sub, err := pub.Append(ctx, "j", submitted())
	if err != nil {
		t.Fatal(err)
	}
	n := 1 + junk(t, ctx, js, "j", "mallory", true)
	// Another job's messages after it, as in any log, and more than a
	// batch of the job's own in between.
	for i := range 300 {
		if _, err := js.Publish(ctx, "e31.job.other.cancel.x", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "e31.job.j.cancel.mallory", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	held := events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1}, Submitter: "alice"}
	last, err := pub.Append(ctx, "j", &held)
	if err != nil {
		t.Fatal(err)
	}
	n++
	for range 10 {
		if _, err := js.Publish(ctx, "e31.job.other.cancel.x", nil); err != nil {
			t.Fatal(err)
		}
	}

	asked := directGets(t, ctx, js)
	for _, from := range []uint64{1, sub.Seq + 1, last.Seq} {
		h, err := bus.ReadHistory(ctx, js, "j", from)
		if err != nil {
			t.Fatal(err)
		}
		if h.Last != last.Seq || len(h.Events) == 0 || h.Events[len(h.Events)-1].Seq != last.Seq {
			t.Errorf("from #%d: last #%d, %d events; want the hold #%d last", from, h.Last, len(h.Events), last.Seq)
		}
		if want := map[uint64]int{1: 2, sub.Seq + 1: 1, last.Seq: 1}[from]; len(h.Events) != want {
			t.Errorf("from #%d: %d events, want %d", from, len(h.Events), want)
		}
		total := 0
		for _, b := range asked() {
			total += b
		}
		if total != n+1 {
			t.Errorf("from #%d: asked for %d messages in all, want the job's %d and one to count them", from, total, n)
		}
	}
}

// A message read on its own (a job's first request) keeps the headers its
// publisher set, even those of the names the server adds to a batch.
func TestTheFirstRequestKeepsItsOwnHeaders(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	m := nats.NewMsg("e31.job.mine.requested.mallory")
	m.Data = []byte("x")
	m.Header.Set("Nats-Num-Pending", "7")
	m.Header.Set("Nats-Last-Sequence", "8")
	m.Header.Set(jetstream.SequenceHeader, "999")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	got, err := bus.FirstRequest(ctx, js, "mine")
	if err != nil {
		t.Fatal(err)
	}
	want := nats.Header{"Nats-Num-Pending": {"7"}, "Nats-Last-Sequence": {"8"}, jetstream.SequenceHeader: {"999"}}
	if fmt.Sprint(got.Header) != fmt.Sprint(want) || string(got.Data) != "x" || got.Sequence != 1 {
		t.Errorf("first request #%d %q %v, want #1 \"x\" %v", got.Sequence, got.Data, got.Header, want)
	}
}

// Last gives the message stored last on its subject, whatever came after
// it on the job's other subjects, and says plainly when there is none: OUTPUT
// takes it for a job's last return to leave a stop it read in the log alone.
func TestLastIsTheNewestMessageOnItsSubject(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	publish := func(subject, body string) uint64 {
		t.Helper()
		ack, err := js.Publish(ctx, subject, []byte(body))
		if err != nil {
			t.Fatalf("publish on %s: %v", subject, err)
		}
		return ack.Sequence
	}
	publish("e31.job.j1.returned", "first")
	want := publish("e31.job.j1.returned", "second")
	publish("e31.job.j1.released", "after it")
	publish("e31.job.j2.returned", "another job's")

	m, err := bus.Last(ctx, js, "e31.job.j1.returned")
	if err != nil {
		t.Fatalf("last: %v", err)
	}
	if m.Sequence != want || string(m.Data) != "second" || m.Subject != "e31.job.j1.returned" {
		t.Errorf("last = #%d %s %q; want #%d e31.job.j1.returned \"second\"", m.Sequence, m.Subject, m.Data, want)
	}
	if _, err := bus.Last(ctx, js, "e31.job.j3.returned"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("last of a subject with no message: %v; want ErrMsgNotFound", err)
	}
}

// TestLeaderLastIsTheNewestMessageOnItsSubject: LeaderLast answers as Last
// does, headers included, from the stream's leader, for any stream.
func TestLeaderLastIsTheNewestMessageOnItsSubject(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	kv, err := js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "node.n1", []byte("boot-1")); err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "node.n1", []byte("boot-2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "node.n2"); err != nil {
		t.Fatal(err)
	}
	stream := "KV_" + events.LeasesBucket
	m, err := bus.LeaderLast(ctx, js, stream, "$KV."+events.LeasesBucket+".node.n1")
	if err != nil {
		t.Fatalf("leader last: %v", err)
	}
	if m.Sequence != rev || string(m.Data) != "boot-2" || m.Subject != "$KV."+events.LeasesBucket+".node.n1" {
		t.Errorf("leader last = #%d %s %q; want #%d node.n1 \"boot-2\"", m.Sequence, m.Subject, m.Data, rev)
	}
	deleted, err := bus.LeaderLast(ctx, js, stream, "$KV."+events.LeasesBucket+".node.n2")
	if err != nil {
		t.Fatalf("leader last of a deleted key: %v", err)
	}
	if op := deleted.Header.Get("KV-Operation"); op != "DEL" {
		t.Errorf("the deleted key's marker has KV-Operation %q, want DEL", op)
	}
	if _, err := bus.LeaderLast(ctx, js, stream, "$KV."+events.LeasesBucket+".node.n3"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("leader last of a subject with no message: %v; want ErrMsgNotFound", err)
	}
}

// TestStepperWalksAFilterInOrder: a Stepper hands the messages on a
// filter one at a time, each the first at or after the sequence asked,
// headers included, and says none (ErrMsgNotFound) past the last, where a
// message on another subject is no answer.
func TestStepperWalksAFilterInOrder(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	kv, err := js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for _, key := range []string{"node.a", "other.x", "node.b", "node.c", "other.y"} {
		rev, err := kv.Put(ctx, key, []byte(key))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(key, "node.") {
			want = append(want, rev)
		}
	}
	stream, filter := "KV_"+events.LeasesBucket, "$KV."+events.LeasesBucket+".node.*"
	step, err := bus.NewStepper(ctx, js, stream)
	if err != nil {
		t.Fatal(err)
	}
	defer step.Close()
	var got []uint64
	from := uint64(1)
	for {
		m, err := step.Next(filter, from)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			t.Fatalf("step from #%d: %v", from, err)
		}
		if !strings.HasPrefix(m.Subject, "$KV."+events.LeasesBucket+".node.") {
			t.Errorf("step from #%d gave %s", from, m.Subject)
		}
		if string(m.Data) != strings.TrimPrefix(m.Subject, "$KV."+events.LeasesBucket+".") {
			t.Errorf("#%d %s holds %q", m.Sequence, m.Subject, m.Data)
		}
		got = append(got, m.Sequence)
		from = m.Sequence + 1
	}
	if !slices.Equal(got, want) {
		t.Errorf("walked #%v; want #%v", got, want)
	}
}

// TestLastOfReadsManyKeysInOneRequest: the last message of each subject
// asked, in stream order and as stored (a deletion's marker too, the
// server's headers gone), none for a subject without one; an answer the
// server cuts short says so, and leaves out what it did not reach.
func TestLastOfReadsManyKeysInOneRequest(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	kv, err := js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, put := range []struct{ key, value string }{{"node.n1", "boot-1"}, {"node.n4", "boot-1"}, {"node.n1", "boot-2"}} {
		if _, err := kv.Put(ctx, put.key, []byte(put.value)); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "node.n2"); err != nil {
		t.Fatal(err)
	}
	key := func(k string) string { return "$KV." + events.LeasesBucket + "." + k }
	msgs, whole, err := bus.LastOf(ctx, js, "KV_"+events.LeasesBucket, []string{key("node.n1"), key("node.n2"), key("node.n3"), key("node.n4")})
	if err != nil || !whole {
		t.Fatalf("last of four keys: whole %v, %v", whole, err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, fmt.Sprintf("#%d %s %q %s", m.Sequence, strings.TrimPrefix(m.Subject, key("")), m.Data, m.Header.Get("KV-Operation")))
		if m.Header.Get(jetstream.SequenceHeader) != "" || m.Header.Get("Nats-Num-Pending") != "" {
			t.Errorf("#%d keeps the server's headers: %v", m.Sequence, m.Header)
		}
	}
	if want := []string{`#2 node.n4 "boot-1" `, `#3 node.n1 "boot-2" `, `#4 node.n2 "" DEL`}; !slices.Equal(got, want) {
		t.Errorf("last of four keys:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if msgs, whole, err := bus.LastOf(ctx, js, "KV_"+events.LeasesBucket, []string{key("node.n9")}); err != nil || !whole || len(msgs) != 0 {
		t.Errorf("last of a key without a message: %d messages, whole %v, %v; want none, whole", len(msgs), whole, err)
	}

	// Twelve messages of 900 KB: more than the server sends in one answer
	// (directMaxBytes, 8 MiB).
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for i := range 12 {
		subjects = append(subjects, fmt.Sprintf("big.%d", i))
		if _, err := js.Publish(ctx, subjects[i], make([]byte, 900<<10)); err != nil {
			t.Fatal(err)
		}
	}
	msgs, whole, err = bus.LastOf(ctx, js, "BIG", subjects)
	if err != nil || whole || len(msgs) == 0 || len(msgs) == len(subjects) {
		t.Errorf("last of twelve large messages: %d of them, whole %v, %v; want some, cut short", len(msgs), whole, err)
	}
}

// A job whose messages lie far apart in the log (it waited, or ran, while
// the log grew) is read subject by subject, each by the server's index:
// no batch of more than one message is asked for. One subject with two
// messages far apart is read as a batch, and as truly.
func TestAJobSpanningTheLogIsReadSubjectBySubject(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, 60*time.Second)
	pub := bus.NewPublisher(js, "e31/test", func() time.Time { return at })

	sub, err := pub.Append(ctx, "j", submitted())
	if err != nil {
		t.Fatal(err)
	}
	others := func() {
		t.Helper()
		for i := range 1500 {
			if _, err := js.PublishAsync(fmt.Sprintf("e31.job.other%d.cancel.x", i), nil); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	others()
	held := events.ComputeHeld{Hold: events.Hold{Attempt: 1, Node: "n1", CPU: 1}, Submitter: "alice"}
	last, err := pub.Append(ctx, "j", &held)
	if err != nil {
		t.Fatal(err)
	}

	asked := directGets(t, ctx, js)
	// largest is the largest batch asked for since the last call.
	largest := func() int {
		t.Helper()
		most := 0
		for _, b := range asked() {
			most = max(most, b)
		}
		return most
	}
	read := func(from uint64, want ...uint64) {
		t.Helper()
		h, err := bus.ReadHistory(ctx, js, "j", from)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, e := range h.Events {
			got = append(got, e.Seq)
		}
		if !slices.Equal(got, want) || h.Last != want[len(want)-1] {
			t.Errorf("from #%d: events %v to #%d, want %v", from, got, h.Last, want)
		}
	}
	read(1, sub.Seq, last.Seq)
	read(sub.Seq+1, last.Seq)
	if b := largest(); b > 1 {
		t.Errorf("a batch of %d asked for: the server scanned the log between the job's messages", b)
	}

	// A second message on the hold's subject, far from the first: a
	// second attempt on the same node.
	others()
	held.Attempt = 2
	again, err := pub.Append(ctx, "j", &held)
	if err != nil {
		t.Fatal(err)
	}
	read(1, sub.Seq, last.Seq, again.Seq)
	read(last.Seq, last.Seq, again.Seq)
}

// directGets watches the direct gets of the log made on js's connection
// and returns asked, which gives the batch each asked for (0 for a request
// without one) since it was last called, in order. It marks the end of what a
// call collects with a request of its own that the server does not
// answer: once the watch has that one, it has every request made before.
func directGets(t *testing.T, ctx context.Context, js jetstream.JetStream) (asked func() []int) {
	t.Helper()
	batches := make(chan int, 64)
	watch, err := js.Conn().Subscribe("$JS.API.DIRECT.GET."+events.Stream, func(m *nats.Msg) {
		var req struct {
			Batch int `json:"batch"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("direct get request %q: %v", m.Data, err)
		}
		select {
		case batches <- req.Batch:
		case <-ctx.Done():
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watch.Unsubscribe() })
	if err := js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []int {
		t.Helper()
		if err := js.Conn().Publish("$JS.API.DIRECT.GET."+events.Stream, []byte(`{"batch":-1}`)); err != nil {
			t.Fatal(err)
		}
		var got []int
		for {
			select {
			case b := <-batches:
				if b == -1 {
					return got
				}
				got = append(got, b)
			case <-ctx.Done():
				t.Fatalf("the watch never had the marker: %v", ctx.Err())
			}
		}
	}
}
