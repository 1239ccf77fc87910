package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/gate"
	"github.com/e31net/e31/pkg/lease"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/stage"
)

var node1 = auth.Identity{Role: auth.Service, Service: auth.RunService, Name: "node-1"}

// startGate runs the node gate as OUTPUT does, with OUTPUT's credentials,
// until the test ends.
func startGate(t *testing.T, tr *trusted) {
	t.Helper()
	js := tr.js(t, auth.Identity{Role: auth.Service, Service: auth.OutputService, Name: "output-1"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	g := gate.New(js, gate.Config{Stores: stage.NewTenants(js, true), Workers: 4})
	go func() { done <- g.Run(ctx) }()
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatalf("the gate: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the gate: %v", err)
		}
	})
}

// TestANodeIsServedThroughTheImports: in the NODES account, with no
// JetStream of its own, a node announces itself and starts a job held on
// it (both acknowledged, the start expecting the job's last sequence),
// keeps its lease (which the leases bucket RENT watches has), has its
// consumer made by the gate and pulls and acks a hold from it, reads the
// images allowed, and what its job writes reaches the job's submitter.
func TestANodeIsServedThroughTheImports(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	ctx := ctxFor(t)
	startGate(t, tr)
	creds, err := tr.keys.Issue(node1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if uc := mustClaims(t, creds); uc.IssuerAccount != tr.keys.NodesAccountKey() {
		t.Fatalf("node-1 is issued for account %s, want NODES %s", uc.IssuerAccount, tr.keys.NodesAccountKey())
	}
	nc := tr.conn(t, node1)
	js := tr.js(t, node1)
	op := tr.js(t, auth.Identity{Role: auth.Operator, Name: "root"})
	pub := bus.NewPublisher(js, "e31/run/node-1", nil)

	if _, err := pub.Append(ctx, "node-1", &events.NodeAnnounced{Node: "node-1", Boot: "b1", CPU: 1, MemoryBytes: 1 << 30}); err != nil {
		t.Fatalf("node-1 announces itself: %v (last refusal %v)", err, nc.LastError())
	}

	kv, err := js.KeyValue(ctx, events.NodeLeasesBucket)
	if err != nil {
		t.Fatalf("node-1 opens the nodes' leases: %v", err)
	}
	l, err := lease.Claim(ctx, kv, "node.node-1", "b1")
	if err != nil {
		t.Fatalf("node-1 claims its lease: %v", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("node-1 renews its lease: %v", err)
	}
	leases, err := op.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := leases.Watch(ctx, "node.node-1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e != nil && string(e.Value()) == "b1" {
			break
		}
	}

	h := events.Hold{Attempt: 1, Node: "node-1", CPU: 1}
	held, err := bus.NewPublisher(op, "e31/rent", nil).Append(ctx, "job-1", &events.ComputeHeld{Hold: h, Submitter: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	holds := gate.NodeConsumers("node-1")[0]
	sub, err := bus.NewSubscriber(js, bus.SubscriberConfig{Durable: holds.Durable, MaxAckPending: 10, AckWait: 10 * time.Second,
		Make: gate.NewClient(nc, "node-1").MakeConsumer})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	msgs, err := sub.Subscribe(ctx, holds.Topic)
	if err != nil {
		t.Fatalf("node-1 reads its holds: %v (last refusal %v)", err, nc.LastError())
	}
	var m interface {
		Ack() bool
	}
	select {
	case got, ok := <-msgs:
		if !ok {
			t.Fatal("node-1's holds ended")
		}
		env, err := bus.Envelope(got)
		if err != nil || env.Seq != held.Seq {
			t.Fatalf("node-1 pulled %v, %v; want the hold #%d", env, err, held.Seq)
		}
		m = got
	case <-ctx.Done():
		t.Fatal("node-1 pulled nothing")
	}
	m.Ack()
	stored, err := pub.React(ctx, held, func([]events.Envelope) ([]events.Event, error) {
		return []events.Event{&events.RunStarted{Hold: h, Isolation: events.IsolationSandbox}}, nil
	})
	if err != nil || len(stored) != 1 || stored[0].NATSSubject != "e31.job.job-1.started.node-1" {
		t.Fatalf("node-1 starts the job: %+v, %v", stored, err)
	}
	cons, err := op.Consumer(ctx, events.Stream, holds.Name())
	if err != nil {
		t.Fatal(err)
	}
	for info := cons.CachedInfo(); info.AckFloor.Stream < held.Seq; {
		select {
		case <-ctx.Done():
			t.Fatalf("node-1's ack never came: ack floor #%d", info.AckFloor.Stream)
		case <-time.After(20 * time.Millisecond):
		}
		if info, err = cons.Info(ctx); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := (limits.Lookup{JS: js}).Limits(ctx, "alice"); err != nil {
		t.Errorf("node-1 reads the images allowed: %v", err)
	}

	alice := tr.conn(t, auth.Identity{Role: auth.Submitter, Name: "alice"})
	logs, err := alice.SubscribeSync(events.LogSubjects("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if err := alice.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(events.LogSubject("alice", "job-1", 1, "node-1"), []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := logs.NextMsgWithContext(ctx); err != nil || string(got.Data) != "hello\n" {
		t.Errorf("alice follows her job's output: %v, %v", got, err)
	}
}

// TestANodeReachesNothingElse: a compromised node, with its real
// credentials and a plain client, may not speak for another node, write
// any lease but its own or roll the leases up, make, change, delete or
// read another's consumers, make, change or purge a stream, touch a
// submitter's bucket, follow a tenant's logs, or have JetStream's answers
// land anywhere in E31; the gate makes it no consumer but its own two, and
// never a push consumer.
func TestANodeReachesNothingElse(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	ctx := ctxFor(t)
	startGate(t, tr)
	op := tr.js(t, auth.Identity{Role: auth.Operator, Name: "root"})
	leases, err := op.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Create(ctx, "leader.rent", []byte("rent-1")); err != nil {
		t.Fatal(err)
	}
	theirs, err := op.KeyValue(ctx, events.NodeLeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := theirs.Put(ctx, "node.node-2", []byte("b2"))
	if err != nil {
		t.Fatal(err)
	}
	// The consumers of OUTPUT and of another node, as they would be.
	for _, name := range []string{"output_e31-job-any-stopped-any", gate.NodeConsumers("node-2")[0].Name()} {
		if _, err := op.CreateOrUpdateConsumer(ctx, events.Stream, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	lastSeq := func(stream string) uint64 {
		t.Helper()
		st, err := op.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.LastSeq
	}
	// The leases bucket sources the nodes' (as they come): the leases in
	// it are checked below, one by one.
	watched := []string{events.Stream, events.KVStream(events.NodeLeasesBucket), "OBJ_" + events.DataBucketFor("alice")}
	before := map[string]uint64{}
	for _, s := range watched {
		before[s] = lastSeq(s)
	}

	nc := tr.conn(t, node1)
	other := gate.NodeConsumers("node-2")[0].Name()
	for _, s := range []string{
		"$KV." + events.LeasesBucket + ".node.node-1",
		"$KV." + events.LeasesBucket + ".leader.rent",
		"$KV." + events.NodeLeasesBucket + ".node.node-2",
		"$JS.API.STREAM.CREATE.MIRROR",
		"$JS.API.STREAM.UPDATE." + events.KVStream(events.LeasesBucket),
		"$JS.API.STREAM.PURGE." + events.Stream,
		"$JS.API.STREAM.PURGE." + events.KVStream(events.NodeLeasesBucket),
		"$JS.API.STREAM.DELETE." + events.Stream,
		"$JS.API.STREAM.INFO." + events.KVStream(events.LedgerBucket),
		"$JS.API.DIRECT.GET." + events.KVStream(events.LedgerBucket),
		"$JS.API.CONSUMER.CREATE." + events.Stream,
		"$JS.API.CONSUMER.CREATE." + events.Stream + "." + gate.NodeConsumers("node-1")[0].Name() + ".e31.job.*.held.node-1",
		"$JS.API.CONSUMER.DURABLE.CREATE." + events.Stream + ".x",
		"$JS.API.CONSUMER.DELETE." + events.Stream + ".output_e31-job-any-stopped-any",
		"$JS.API.CONSUMER.INFO." + events.Stream + ".output_e31-job-any-stopped-any",
		"$JS.API.CONSUMER.MSG.NEXT." + events.Stream + "." + other,
		"$JS.ACK." + events.Stream + "." + other + ".1.1.1.1.1",
		"$JS.API.DIRECT.GET.OBJ_" + events.DataBucketFor("alice"),
		"$O." + events.DataBucketFor("alice") + ".C.x",
		"e31.logs.alice.job-1.1.node-2",
		"e31.gate.node-2.get",
		"e31.poison.rent",
		events.RequestSubject("job-1", "node-1"),
	} {
		if !refused(t, nc, s) {
			t.Errorf("node-1 may publish on %s", s)
		}
	}
	for _, s := range []string{events.LogSubjects("alice"), "_INBOX_submitter_alice.>", events.GateSubjects("*"), "e31.job.>"} {
		if !subRefused(t, nc, s) {
			t.Errorf("node-1 may subscribe to %s", s)
		}
	}

	// Its own lease, rolled up: refused by the bucket, which takes no
	// rollups; the leader's lease and node-2's are intact.
	js := tr.js(t, node1)
	m := nats.NewMsg("$KV." + events.NodeLeasesBucket + ".node.node-1")
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
	if _, err := js.PublishMsg(ctx, m); err == nil {
		t.Error("node-1 rolled up the nodes' leases")
	}

	// Every answer JetStream gives it, whatever reply it names, comes back
	// into NODES.
	targets := []string{
		"$KV." + events.LeasesBucket + ".leader.rent",
		"$KV." + events.NodeLeasesBucket + ".node.node-2",
		"e31.job.job-9.stopped.node-2",
		"$O." + events.DataBucketFor("alice") + ".C.x",
	}
	for _, reply := range targets {
		for _, subject := range []string{"$JS.API.INFO", "$JS.API.STREAM.INFO." + events.Stream,
			"$KV." + events.NodeLeasesBucket + ".node.node-1", "e31.job.job-9.stopped.node-1", "e31.gate.node-1.consumer"} {
			if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := nc.RequestWithContext(ctx, "$JS.API.INFO", nil); err != nil {
		t.Fatalf("node-1's own request: %v", err)
	}

	// The gate: no consumer of another's, none that pushes.
	c := gate.NewClient(nc, "node-1")
	cc := jetstream.ConsumerConfig{Durable: other, FilterSubject: events.HeldSubject("node-2"), AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10}
	if err := c.MakeConsumer(ctx, events.Stream, cc); !errors.Is(err, gate.ErrRefused) {
		t.Errorf("the gate made node-1 node-2's consumer: %v", err)
	}
	mine := gate.NodeConsumers("node-1")[0]
	push, err := json.Marshal(map[string]any{"durable_name": mine.Name(), "filter_subject": mine.Topic, "ack_policy": "explicit",
		"max_ack_pending": 10, "deliver_subject": "$KV." + events.LeasesBucket + ".leader.rent"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := nc.RequestWithContext(ctx, events.GateSubject("node-1", gate.OpConsumer), push)
	if err != nil || r.Header.Get(gate.HeaderError) != gate.CodeRefused {
		t.Errorf("the gate made node-1 a push consumer: %v, %v", r, err)
	}
	if _, err := op.Consumer(ctx, events.Stream, mine.Name()); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("node-1's consumer exists after two refusals: %v", err)
	}

	if e, err := leases.Get(ctx, "leader.rent"); err != nil || string(e.Value()) != "rent-1" {
		t.Errorf("the leader's lease: %v, %v", e, err)
	}
	if e, err := theirs.Get(ctx, "node.node-2"); err != nil || e.Revision() != rev {
		t.Errorf("node-2's lease: %v, %v; want revision %d unchanged", e, err, rev)
	}
	for _, s := range watched {
		// The log took node-1's own stop probe (junk on its own
		// subject, which every reader sets aside), and its bucket its
		// own lease, once for each target.
		want := before[s]
		if s == events.Stream || s == events.KVStream(events.NodeLeasesBucket) {
			want += uint64(len(targets))
		}
		if now := lastSeq(s); now != want {
			t.Errorf("stream %s moved from #%d to #%d, want #%d", s, before[s], now, want)
		}
	}
	for _, name := range []string{"output_e31-job-any-stopped-any", other} {
		if _, err := op.Consumer(ctx, events.Stream, name); err != nil {
			t.Errorf("consumer %s: %v", name, err)
		}
	}
}

// subRefused subscribes to subject and reports whether the server refused
// it.
func subRefused(t *testing.T, nc *nats.Conn, subject string) bool {
	t.Helper()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() }) // closing the connection ends it too
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	err = nc.LastError()
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject)
}
