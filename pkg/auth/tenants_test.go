package auth_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
)

// roundTrip puts data into user's bucket and reads it back through nc, as
// the CLI stages inputs and fetches output (pkg/stage), and returns what it
// read.
func roundTrip(t *testing.T, nc *nats.Conn, user string, data []byte) []byte {
	t.Helper()
	ctx := ctxFor(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := stage.NewTenants(js, false).For(ctx, user)
	if err != nil {
		t.Fatalf("open %s's bucket: %v (last refusal: %v)", user, err, nc.LastError())
	}
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if err := store.Put(ctx, "obj-"+hex.EncodeToString(sum[:4]), digest, int64(len(data)), bytes.NewReader(data)); err != nil {
		t.Fatalf("put into %s's bucket: %v (last refusal: %v)", user, err, nc.LastError())
	}
	rc, err := store.Get(ctx, "obj-"+hex.EncodeToString(sum[:4]))
	if err != nil {
		t.Fatalf("get from %s's bucket: %v (last refusal: %v)", user, err, nc.LastError())
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read from %s's bucket: %v (last refusal: %v)", user, err, nc.LastError())
	}
	return got
}

// TestASubmitterIsServedThroughTheImports: in the TENANTS account, with no
// JetStream of its own, a submitter stages and fetches data in its bucket,
// its job request is acknowledged, and a query service answers it.
func TestASubmitterIsServedThroughTheImports(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	ctx := ctxFor(t)
	alice := auth.Identity{Role: auth.Submitter, Name: "alice"}
	creds, err := tr.keys.Issue(alice, 0)
	if err != nil {
		t.Fatal(err)
	}
	if uc := mustClaims(t, creds); uc.IssuerAccount != tr.keys.TenantsAccountKey() {
		t.Fatalf("alice is issued for account %s, want TENANTS %s", uc.IssuerAccount, tr.keys.TenantsAccountKey())
	}
	nc := tr.conn(t, alice)

	// 1 MiB: eight chunks, read with pull requests whose answers come back
	// through the import.
	data := make([]byte, 1<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(t, nc, "alice", data); !bytes.Equal(got, data) {
		t.Fatalf("alice read back %d bytes, not the %d she put", len(got), len(data))
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	env := events.New("job-1", &events.JobRequested{Submitter: "alice"}, "test", time.Now())
	m, err := env.Msg()
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil || ack.Stream != events.Stream {
		t.Fatalf("alice's job request: %+v, %v", ack, err)
	}

	// A query service in E31 sees the server's own reply, which
	// query.ReplyAllowed lets it answer; the answer reaches alice.
	ledger := tr.conn(t, auth.Identity{Role: auth.Service, Service: auth.LedgerService, Name: "ledger-1"})
	sub, err := ledger.Subscribe(wire.LedgerSubject("*", wire.EndpointList), func(m *nats.Msg) {
		if query.ReplyAllowed(wire.UserOf(m.Subject), m.Reply) {
			_ = m.Respond([]byte("answer for " + wire.UserOf(m.Subject)))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() }) // closing the connection ends it too
	if err := ledger.Flush(); err != nil {
		t.Fatal(err)
	}
	answer, err := nc.RequestWithContext(ctx, wire.LedgerSubject("alice", wire.EndpointList), nil)
	if err != nil || string(answer.Data) != "answer for alice" {
		t.Fatalf("alice's query: %v, %v", answer, err)
	}
}

// TestJetStreamAnswersASubmitterOnlyInItsOwnAccount: the JetStream API,
// the E31 stream's PubAcks and the object store's PubAcks answer whatever
// reply subject a request names. A submitter who names a node's lease, an
// event subject, another tenant's request subject or object must change
// nothing: the answers go back into TENANTS, where nothing stores them.
// Nor may it make a push consumer on its own bucket that delivers to those
// subjects, inside E31 (it reads with direct gets).
// With one account for everyone, the lease was overwritten by a JSON API
// answer and the answers were stored in the log.
func TestJetStreamAnswersASubmitterOnlyInItsOwnAccount(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	ctx := ctxFor(t)
	op := tr.js(t, auth.Identity{Role: auth.Operator, Name: "root"})
	leases, err := op.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	leaseRev, err := leases.Put(ctx, "node.n1", []byte("n1"))
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func(stream string) uint64 {
		t.Helper()
		st, err := op.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().State.LastSeq
	}
	bobsBucket := "OBJ_" + events.DataBucketFor("bob")
	alicesBucket := "OBJ_" + events.DataBucketFor("alice")
	kvStream := "KV_" + events.LeasesBucket
	before := map[string]uint64{bobsBucket: lastSeq(bobsBucket), kvStream: lastSeq(kvStream)}

	alice := auth.Identity{Role: auth.Submitter, Name: "alice"}
	nc := tr.conn(t, alice)
	victim := subjectFor(t, events.TypeJobSubmitted, "", "")
	targets := []string{
		"$KV." + events.LeasesBucket + ".node.n1",
		victim,
		subjectFor(t, events.TypeJobRequested, "", "bob"),
		"$O." + events.DataBucketFor("bob") + ".M.eA",
		"$O." + events.DataBucketFor("bob") + ".C.x",
	}
	ownRequest := events.RequestSubject("probe", "alice")
	watcher := tr.conn(t, auth.Identity{Role: auth.Operator, Name: "watcher"})
	watches := map[string]*nats.Subscription{}
	for _, reply := range targets {
		sub, err := watcher.SubscribeSync(reply)
		if err != nil {
			t.Fatal(err)
		}
		watches[reply] = sub
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	requests := []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO." + alicesBucket,
		ownRequest,
		"$O." + events.DataBucketFor("alice") + ".C.probe",
	}
	var pushed []string
	for _, reply := range targets {
		for _, subject := range requests {
			if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
		}
		// A push consumer on her own bucket delivering there, with
		// heartbeats, which carry no subject of hers. She may make none.
		cfg, err := json.Marshal(map[string]any{"stream_name": alicesBucket, "config": map[string]any{
			"deliver_subject": reply, "deliver_policy": "all", "ack_policy": "none",
			"idle_heartbeat": int64(100 * time.Millisecond), "flow_control": true}})
		if err != nil {
			t.Fatal(err)
		}
		if pushConsumer(t, nc, "$JS.API.CONSUMER.CREATE."+alicesBucket, cfg) {
			t.Errorf("alice made a push consumer delivering to %s", reply)
			pushed = append(pushed, reply)
		}
	}
	// Each kind of request once more on her own inbox: answered after the
	// ones before it.
	for _, subject := range requests {
		if _, err := nc.RequestWithContext(ctx, subject, []byte("{}")); err != nil {
			t.Fatalf("%s on alice's own inbox: %v", subject, err)
		}
	}
	// Push consumers, had she made any, deliver in E31, where the operator
	// listens on every target (which makes them deliver at once): a
	// heartbeat on each says it has had everything, and heartbeats
	// themselves have come.
	for _, reply := range pushed {
		for {
			m, err := watches[reply].NextMsgWithContext(ctx)
			if err != nil {
				t.Fatalf("no heartbeat of alice's push consumer on %s: %v", reply, err)
			}
			if m.Header.Get("Status") == "100" {
				break
			}
		}
	}

	if e, err := leases.Get(ctx, "node.n1"); err != nil {
		t.Errorf("node n1's lease: %v", err)
	} else if e.Revision() != leaseRev || string(e.Value()) != "n1" {
		t.Errorf("node n1's lease is revision %d %.60q, want revision %d unchanged", e.Revision(), e.Value(), leaseRev)
	}
	for stream, seq := range before {
		if now := lastSeq(stream); now != seq {
			t.Errorf("stream %s moved from #%d to #%d", stream, seq, now)
		}
	}
	st, err := op.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	for subject, n := range info.State.Subjects {
		if subject != ownRequest {
			t.Errorf("the log holds %d messages on %s", n, subject)
		}
	}
}

// pushConsumer asks, on nc, for a consumer on subject with config cfg, and
// reports whether it was made. The server's refusal comes before the
// answer to the flush that follows.
func pushConsumer(t *testing.T, nc *nats.Conn, subject string, cfg []byte) bool {
	t.Helper()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() }) // closing the connection ends it too
	if err := nc.PublishRequest(subject, inbox, cfg); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
		return false
	}
	m, err := sub.NextMsgWithContext(ctxFor(t))
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	var created struct{ Error *struct{ Description string } }
	if err := json.Unmarshal(m.Data, &created); err != nil || created.Error != nil {
		t.Fatalf("%s: %s", subject, m.Data)
	}
	return true
}

// TestAKeysDirectoryFromBeforeGainsTheTenantsAccount: a keys directory
// made when e31 had one account (`e31 dev --dir`, deploy/secrets/keys)
// loads, with the TENANTS account's keys made and kept, and the E31
// account unchanged.
func TestAKeysDirectoryFromBeforeGainsTheTenantsAccount(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	k1, _, err := auth.InitKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k1.Trust(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{auth.TenantsKeyFile, auth.TenantsSigningKeyFile, auth.TenantsJWTFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	k2, err := auth.LoadKeys(dir)
	if err != nil {
		t.Fatalf("LoadKeys of a directory without the TENANTS keys: %v", err)
	}
	if k2.AccountKey() != k1.AccountKey() || k2.TenantsAccountKey() == k1.TenantsAccountKey() {
		t.Errorf("E31 %s then %s; TENANTS %s then %s: want E31 kept and TENANTS new",
			k1.AccountKey(), k2.AccountKey(), k1.TenantsAccountKey(), k2.TenantsAccountKey())
	}
	k3, created, err := auth.InitKeys(dir)
	if err != nil || created || k3.TenantsAccountKey() != k2.TenantsAccountKey() {
		t.Errorf("InitKeys after: created %v, %v, TENANTS %s want %s", created, err, k3.TenantsAccountKey(), k2.TenantsAccountKey())
	}
	for _, f := range []string{auth.TenantsKeyFile, auth.TenantsSigningKeyFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, want mode 0600", f, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, auth.TenantsKeyFile), []byte(strings.Repeat("x", 58)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadKeys(dir); !errors.Is(err, auth.ErrKeys) {
		t.Errorf("LoadKeys with a broken TENANTS key: %v, want ErrKeys", err)
	}
}
