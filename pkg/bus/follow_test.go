package bus_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestFollowReadsEverythingInOrderAndGoesOn: forged statuses, a deleted
// consumer and messages logged while it waits stop nothing.
func TestFollowReadsEverythingInOrderAndGoesOn(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	publish := func(subject string, h nats.Header) uint64 {
		t.Helper()
		m := nats.NewMsg(subject)
		for k, vs := range h {
			m.Header[k] = vs
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	for _, status := range []string{"100", "404", "408", "409", "503"} {
		publish("e31.job.v.cancel.mallory", nats.Header{"Status": {status}, "Description": {"Consumer Deleted"}})
	}
	stream, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	consumers := info.State.Consumers

	f, err := bus.Follow(ctx, js, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if f.Pending() != 5 {
		t.Errorf("pending at the start: %d, want 5", f.Pending())
	}
	read := func(want uint64) {
		t.Helper()
		m, _, err := f.Next()
		if err != nil {
			t.Fatal(err)
		}
		if m.Sequence != want {
			t.Fatalf("read #%d, want #%d", m.Sequence, want)
		}
	}
	for seq := uint64(1); seq <= 5; seq++ {
		read(seq)
	}
	// Live: logged while it waits.
	go func() {
		if _, err := js.Publish(ctx, "e31.job.v.cancel.alice", nil); err != nil {
			t.Error(err)
		}
	}()
	read(6)
	// Its consumer deleted under it: it goes on where it was.
	names := stream.ConsumerNames(ctx)
	for name := range names.Name() {
		if err := js.DeleteConsumer(ctx, events.Stream, name); err != nil {
			t.Fatal(err)
		}
	}
	publish("e31.job.v.cancel.alice", nil)
	read(7)
	f.Stop()
	if info, err = stream.Info(ctx); err != nil || info.State.Consumers != consumers {
		t.Errorf("consumers after Stop: %d (%v), want %d", info.State.Consumers, err, consumers)
	}
}

// TestFollowAsKeepsItsNameAndReplacesOneLeftBehind: a named follower's
// consumer is found under its name, made again under it when deleted, and
// one an earlier reader left behind (reading from elsewhere) is replaced.
func TestFollowAsKeepsItsNameAndReplacesOneLeftBehind(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	for range 3 {
		if _, err := js.Publish(ctx, "e31.job.v.cancel.alice", nil); err != nil {
			t.Fatal(err)
		}
	}
	// Left behind: the same name, reading from #3.
	left, err := bus.FollowAs(ctx, js, "reader-1", nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	_ = left // abandoned without Stop, as by a process that died
	f, err := bus.FollowAs(ctx, js, "reader-1", nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if m, _, err := f.Next(); err != nil || m.Sequence != 1 {
		t.Fatalf("first read: %v (%v), want #1", m, err)
	}
	if _, err := js.Consumer(ctx, events.Stream, "reader-1"); err != nil {
		t.Fatalf("the consumer under its name: %v", err)
	}
	if err := js.DeleteConsumer(ctx, events.Stream, "reader-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "e31.job.v.cancel.alice", nil); err != nil {
		t.Fatal(err)
	}
	for want := uint64(2); want <= 4; want++ {
		if m, _, err := f.Next(); err != nil || m.Sequence != want {
			t.Fatalf("read after its consumer was deleted: %v (%v), want #%d", m, err, want)
		}
	}
	if _, err := js.Consumer(ctx, events.Stream, "reader-1"); err != nil {
		t.Errorf("the consumer made again under its name: %v", err)
	}
}

// TestFollowOfTheWholeLogFiltersNothing: a follower of every subject the
// stream has reads on a consumer with no filter (the server matches no
// subject for it) and still reads every message, job and node alike; one
// of a part of the log keeps its filter and reads that part only.
func TestFollowOfTheWholeLogFiltersNothing(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	subjects := []string{"e31.job.a.cancel.alice", "e31.node.n1.announced", "e31.job.b.cancel.bob", "e31.node.n2.announced"}
	for _, subject := range subjects {
		if _, err := js.Publish(ctx, subject, nil); err != nil {
			t.Fatal(err)
		}
	}
	follow := func(name string, filters []string) (*bus.Follower, []string) {
		t.Helper()
		f, err := bus.FollowAs(ctx, js, name, filters, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Stop)
		cons, err := js.Consumer(ctx, events.Stream, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := cons.CachedInfo().Config
		return f, append(cfg.FilterSubjects, cfg.FilterSubject)
	}
	read := func(f *bus.Follower, want []string) {
		t.Helper()
		for i, subject := range want {
			m, _, err := f.Next()
			if err != nil {
				t.Fatal(err)
			}
			if m.Subject != subject {
				t.Fatalf("message %d: %s, want %s", i, m.Subject, subject)
			}
		}
	}

	for _, filters := range [][]string{nil, {events.NodeSubjects, events.JobSubjects}} {
		f, filtered := follow("whole", filters)
		if slices.ContainsFunc(filtered, func(s string) bool { return s != "" }) {
			t.Errorf("following %q: the consumer filters on %q, want nothing", filters, filtered)
		}
		read(f, subjects)
		f.Stop()
	}

	f, filtered := follow("jobs", []string{events.JobSubjects})
	if !slices.Contains(filtered, events.JobSubjects) {
		t.Errorf("following the jobs: the consumer filters on %q, want %s", filtered, events.JobSubjects)
	}
	read(f, []string{subjects[0], subjects[2]})
	if _, err := js.Publish(ctx, subjects[0], nil); err != nil {
		t.Fatal(err)
	}
	if m, _, err := f.Next(); err != nil || m.Sequence != 5 {
		t.Fatalf("next job message: %v (%v), want #5, the node messages skipped", m, err)
	}
}

// TestFollowGivesUpARequestNoServerAnswers: a request of the JetStream API
// that no server answers (taken by a server that is then killed, or sent
// while a stream's leader is elected) ends in its own time, whatever the
// deadline of the follower's context: the follower then tries again, or
// says why it cannot follow, rather than standing still until that
// deadline. Here every request of the API is taken and never answered.
func TestFollowGivesUpARequestNoServerAnswers(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := srv.Conn(t)
	sink, err := nc.Subscribe("sink.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sink.Unsubscribe() }()
	js, err := jetstream.NewWithAPIPrefix(nc, "sink")
	if err != nil {
		t.Fatal(err)
	}
	ctx := natstest.Context(t, 10*time.Minute) // far: a command's, a test's
	done := make(chan error, 1)
	go func() {
		f, err := bus.Follow(ctx, js, nil, 1)
		if err == nil {
			f.Stop()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("follow with nothing answering: %v, want a request that timed out", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("follow still waits for an answer after a minute: its request is bounded only by its context's deadline")
	}
}

// TestFollowAsGoesOnUnderAnotherNameWhenItsOwnCannotBeHad: a consumer of
// one replica lives on one server, and while that server is down the
// cluster keeps it, answers nothing about it and deletes it not. The
// follower must not wait for the server: it reads under another name
// meanwhile. Here the deletion of the one left behind goes unanswered,
// as it did in the cluster test, where RENT waited a minute for it.
func TestFollowAsGoesOnUnderAnotherNameWhenItsOwnCannotBeHad(t *testing.T) {
	t.Parallel()
	nc, js, ctx := logOf(t, 3)
	// Left behind under the name, reading from #3.
	left, err := bus.FollowAs(ctx, js, "reader-2", nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	_ = left
	// The JetStream API through a relay that answers everything but the
	// deletion of reader-2.
	viaRelay := relayAPI(t, nc, func(api string) bool {
		return strings.HasPrefix(api, "CONSUMER.DELETE."+events.Stream+".reader-2")
	})
	f, err := bus.FollowAs(ctx, viaRelay, "reader-2", nil, 1)
	if err != nil {
		t.Fatalf("follow with the name's consumer left behind and not to be deleted: %v", err)
	}
	defer f.Stop()
	for want := uint64(1); want <= 3; want++ {
		if m, _, err := f.Next(); err != nil || m.Sequence != want {
			t.Fatalf("read: %v (%v), want #%d", m, err, want)
		}
	}
	if name := f.Name(); !strings.HasPrefix(name, "reader-2-") {
		t.Errorf("the follower reads under %q, want reader-2 and a suffix", name)
	}
}

// TestFollowerSaysWhenItCannotMakeItsConsumerAgain: a follower that lost
// its consumer and cannot make it again tells Retrying each failure, so
// that a reading standing still is seen in the log at once, not when it
// gives up; and reads on once the consumer can be made.
func TestFollowerSaysWhenItCannotMakeItsConsumerAgain(t *testing.T) {
	t.Parallel()
	nc, js, ctx := logOf(t, 1)
	// The JetStream API through a relay that, while refusing, answers no
	// request to make a consumer.
	var refusing atomic.Bool
	viaRelay := relayAPI(t, nc, func(api string) bool {
		return refusing.Load() && strings.HasPrefix(api, "CONSUMER.CREATE.")
	})
	f, err := bus.FollowAs(ctx, viaRelay, "reader-3", nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	failed := make(chan error, 16)
	f.Retrying(func(err error, _ time.Duration) {
		select {
		case failed <- err:
		default:
		}
	})
	if m, _, err := f.Next(); err != nil || m.Sequence != 1 {
		t.Fatalf("first read: %v (%v), want #1", m, err)
	}
	refusing.Store(true)
	if err := js.DeleteConsumer(ctx, events.Stream, "reader-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "e31.job.v.cancel.alice", nil); err != nil {
		t.Fatal(err)
	}
	go func() {
		select {
		case err := <-failed:
			t.Logf("told: %v", err)
		case <-ctx.Done():
		}
		refusing.Store(false)
	}()
	if m, _, err := f.Next(); err != nil || m.Sequence != 2 {
		t.Fatalf("read after the consumer could be made again: %v (%v), want #2", m, err)
	}
	if refusing.Load() {
		t.Error("the follower read on without telling of the failures to make its consumer again")
	}
}

// relayAPI is a JetStream handle whose API requests go through a relay
// that passes each on to the server but those drop says to leave
// unanswered, as a cluster leaves those about a server that is down.
func relayAPI(t *testing.T, nc *nats.Conn, drop func(api string) bool) jetstream.JetStream {
	t.Helper()
	relay, err := nc.Subscribe("relay.>", func(m *nats.Msg) {
		api := strings.TrimPrefix(m.Subject, "relay.")
		if drop(api) {
			return
		}
		_ = nc.PublishMsg(&nats.Msg{Subject: "$JS.API." + api, Reply: m.Reply, Header: m.Header, Data: m.Data})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Unsubscribe() })
	js, err := jetstream.NewWithAPIPrefix(nc, "relay")
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// logOf is a server whose log holds n messages, a connection to it, and
// a context for the test.
func logOf(t *testing.T, n int) (*nats.Conn, jetstream.JetStream, context.Context) {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	for range n {
		if _, err := js.Publish(ctx, "e31.job.v.cancel.alice", nil); err != nil {
			t.Fatal(err)
		}
	}
	return srv.Conn(t), js, ctx
}
