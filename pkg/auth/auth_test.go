package auth_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
)

// trusted is a real server in operator mode with e31's streams set up and
// the data buckets of alice and bob made, as `e31 dev --users alice,bob`
// leaves it.
type trusted struct {
	srv  *broker.Server
	keys *auth.Keys
}

func startTrusted(t *testing.T) *trusted {
	t.Helper()
	keys, created, err := auth.InitKeys(filepath.Join(t.TempDir(), "keys"))
	if err != nil || !created {
		t.Fatalf("InitKeys: created %v, %v", created, err)
	}
	trust, err := keys.Trust()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.Start(broker.Config{Dir: t.TempDir(), Sync: broker.SyncInterval, Name: "authtest", Trust: &trust})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	tr := &trusted{srv: srv, keys: keys}
	js := tr.js(t, auth.Identity{Role: auth.Operator, Name: "root"})
	ctx := ctxFor(t)
	if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob"} {
		if _, err := stage.OpenBucket(ctx, js, u); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// short is a context for something that should be refused: a refused
// request has no answer, so it fails when this ends.
func short(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// conn connects as id, with its credentials.
func (tr *trusted) conn(t *testing.T, id auth.Identity, more ...nats.Option) *nats.Conn {
	t.Helper()
	creds, err := tr.keys.Issue(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := creds.Options()
	if err != nil {
		t.Fatal(err)
	}
	// Refusals are read from LastError; nats.go's default handler would
	// print each one.
	opts = append(opts, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	nc, err := tr.srv.Connect(id.String(), append(opts, more...)...)
	if err != nil {
		t.Fatalf("connect as %s: %v", id, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (tr *trusted) js(t *testing.T, id auth.Identity) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(tr.conn(t, id), jetstream.WithDefaultTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// refused publishes on subject and reports whether the server refused it.
// The server answers a refused publish with an error before it answers the
// flush that follows, so the error is in by the time Flush returns.
func refused(t *testing.T, nc *nats.Conn, subject string) bool {
	t.Helper()
	if err := nc.Publish(subject, nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	err := nc.LastError()
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`)
}

var probes atomic.Int64

// subjectFor is a fresh subject of an event of ceType: a new job id each
// time, so that a refusal names only this probe. tail is the identity or
// node the subject ends with, for the types that have one.
func subjectFor(t *testing.T, ceType, node, tail string) string {
	t.Helper()
	id := fmt.Sprintf("probe-%d", probes.Add(1))
	var ev events.Event
	switch ceType {
	case events.TypeJobRequested:
		ev = &events.JobRequested{Submitter: tail}
	case events.TypeCancelRequested:
		ev = &events.CancelRequested{By: tail}
	case events.TypeDeleteRequested:
		ev = &events.DeleteRequested{What: events.WhatData, By: tail}
	case events.TypeComputeHeld:
		ev = &events.ComputeHeld{Hold: events.Hold{Node: tail}}
	case events.TypeRunStarted:
		ev = &events.RunStarted{Hold: events.Hold{Node: node}}
	case events.TypeRunStopped:
		ev = &events.RunStopped{Hold: events.Hold{Node: node}}
	case events.TypeCheckpointSaved:
		ev = &events.CheckpointSaved{Hold: events.Hold{Node: node}}
	case events.TypeNodeAnnounced:
		id, ev = node, &events.NodeAnnounced{Node: node}
	case events.TypeNodeExpired:
		id, ev = node, &events.NodeExpired{Node: node}
	case events.TypeDeviceWithdrawn:
		id, ev = node, &events.DeviceWithdrawn{Node: node}
	case events.TypeDeviceRestored:
		id, ev = node, &events.DeviceRestored{Node: node}
	default:
		ev = sampleOf(t, ceType)
	}
	s, err := events.SubjectOf(id, ev)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sampleOf(t *testing.T, ceType string) events.Event {
	t.Helper()
	for _, ev := range []events.Event{&events.JobSubmitted{}, &events.JobRejected{}, &events.RunStarted{}, &events.RunStopped{},
		&events.OutputReturned{}, &events.ComputeReleased{}, &events.JobCancelled{}, &events.HoldLost{}, &events.HoldExpired{},
		&events.Deleted{What: events.WhatData}} {
		if ev.Type() == ceType {
			return ev
		}
	}
	t.Fatalf("no sample of %s", ceType)
	return nil
}

// mayPublish is the table the permissions must give: for each event type,
// who may publish it. "submitter" means on a subject that ends with its
// own name.
var mayPublish = map[string][]string{
	events.TypeJobRequested:    {"submitter"},
	events.TypeCancelRequested: {"submitter"},
	events.TypeJobSubmitted:    {auth.SubmitService},
	events.TypeJobRejected:     {auth.SubmitService, auth.RentService},
	events.TypeComputeHeld:     {auth.RentService},
	events.TypeJobCancelled:    {auth.RentService},
	events.TypeHoldLost:        {auth.RentService},
	events.TypeHoldExpired:     {auth.RentService},
	events.TypeNodeExpired:     {auth.RentService},
	events.TypeRunStarted:      {auth.RunService},
	events.TypeRunStopped:      {auth.RunService},
	events.TypeCheckpointSaved: {auth.RunService},
	events.TypeNodeAnnounced:   {auth.RunService},
	events.TypeDeviceWithdrawn: {auth.RunService},
	events.TypeDeviceRestored:  {auth.RunService},
	events.TypeOutputReturned:  {auth.OutputService},
	events.TypeDeleted:         {auth.OutputService},
	events.TypeComputeReleased: {auth.ReleaseService},
	// A deletion request names who asks in its subject, and OUTPUT acts
	// only on the submitter's own (or the operator's).
	events.TypeDeleteRequested: {"submitter"},
}

func TestTheTableCoversEveryEventTypeAndMatchesOwned(t *testing.T) {
	t.Parallel()
	for _, ceType := range events.Types() {
		who, ok := mayPublish[ceType]
		if !ok {
			t.Errorf("%s: a new event type: say who may publish it (pkg/auth owned, and this table)", ceType)
			continue
		}
		for _, svc := range auth.Services {
			if got, want := slices.Contains(auth.Owned(svc), ceType), slices.Contains(who, svc); got != want {
				t.Errorf("%s: owned by %s is %v, the table says %v", ceType, svc, got, want)
			}
		}
	}
	for _, svc := range auth.Services {
		if _, err := auth.Permissions(auth.Identity{Role: auth.Service, Service: svc, Name: svc + "-1"}); err != nil {
			t.Errorf("service %s: %v", svc, err)
		}
	}
}

// TestEachRoleMayPublishOnlyItsEvents tries every event type as every role
// on a real server: the server refuses all but the table's.
func TestEachRoleMayPublishOnlyItsEvents(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	ids := []auth.Identity{
		{Role: auth.Submitter, Name: "alice"},
		{Role: auth.Auditor, Name: "auditor"},
		{Role: auth.Operator, Name: "root"},
	}
	for _, svc := range auth.Services {
		name := svc + "-1"
		if svc == auth.RunService {
			name = "node-1"
		}
		ids = append(ids, auth.Identity{Role: auth.Service, Service: svc, Name: name})
	}
	for _, id := range ids {
		nc := tr.conn(t, id)
		for _, ceType := range events.Types() {
			who := mayPublish[ceType]
			allowed := id.Role == auth.Operator || slices.Contains(who, id.Service) ||
				id.Role == auth.Submitter && slices.Contains(who, "submitter")
			// As itself: its own name, its own node.
			own := subjectFor(t, ceType, "node-1", id.Principal())
			if got := !refused(t, nc, own); got != allowed {
				t.Errorf("%s publishing %s on %s: allowed %v, want %v", id, events.Name(ceType), own, got, allowed)
			}
			// As someone else: bob's name, another node.
			switch ceType {
			case events.TypeJobRequested, events.TypeCancelRequested, events.TypeDeleteRequested, events.TypeNodeAnnounced,
				events.TypeRunStarted, events.TypeRunStopped, events.TypeCheckpointSaved, events.TypeDeviceWithdrawn, events.TypeDeviceRestored:
				other := subjectFor(t, ceType, "node-2", "bob")
				if got := !refused(t, nc, other); got != (id.Role == auth.Operator) {
					t.Errorf("%s publishing %s on %s: allowed %v, want only the operator", id, events.Name(ceType), other, got)
				}
			}
		}
	}
}

// TestASubmitterReadsNothingButItsOwn: no consumer on the log, no direct
// get, no stream info; another user's queries, inbox and bucket are out of
// reach; its own bucket works.
func TestASubmitterReadsNothingButItsOwn(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	alice := auth.Identity{Role: auth.Submitter, Name: "alice"}
	nc := tr.conn(t, alice)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	// An ordered consumer retries its creation until its context ends.
	if _, err := js.OrderedConsumer(short(t), events.Stream, jetstream.OrderedConsumerConfig{}); err == nil {
		t.Error("alice made a consumer on the log")
	}
	for _, s := range []string{
		"$JS.API.STREAM.INFO." + events.Stream,
		"$JS.API.DIRECT.GET." + events.Stream,
		"$JS.API.STREAM.MSG.GET." + events.Stream,
		"$JS.API.CONSUMER.CREATE." + events.Stream + ".x",
		"$JS.API.STREAM.CREATE.OBJ_E31_DATA_mallory",
		"$JS.API.STREAM.INFO.OBJ_" + events.DataBucketFor("bob"),
		"$O." + events.DataBucketFor("bob") + ".M.x",
		wire.LedgerSubject("bob", wire.EndpointRecord),
		wire.RentWhySubject(auth.AuditorName),
		wire.LedgerSubject(events.Operator, wire.EndpointList),
		wire.OutputStoredSubject("bob"),
		"e31.poison.submit",
		"$KV." + events.LeasesBucket + ".leader.rent",
	} {
		if !refused(t, nc, s) {
			t.Errorf("alice may publish on %s", s)
		}
	}
	if refused(t, nc, wire.LedgerSubject("alice", wire.EndpointRecord)) {
		t.Error("alice may not ask the ledger as herself")
	}
	// Bob's replies are his alone.
	bob := auth.Identity{Role: auth.Submitter, Name: "bob"}
	sub, err := nc.SubscribeSync(bob.InboxPrefix() + ".x")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() }) // closing the connection ends it too
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.LastError(); !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), bob.InboxPrefix()) {
		t.Errorf("alice subscribing to bob's inbox: %v, want a permissions violation", err)
	}
	if _, err := js.ObjectStore(short(t), events.DataBucketFor("bob")); err == nil {
		t.Error("alice opened bob's bucket")
	}
	// Her own bucket: put, get, and the log takes her request.
	if got := roundTrip(t, nc, "alice", []byte("hers")); string(got) != "hers" {
		t.Fatalf("get from her own bucket: %q", got)
	}
	env := events.New("job-1", &events.JobRequested{Submitter: "alice"}, "test", time.Now())
	m, err := env.Msg()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("alice's request: %v", err)
	}
}

// TestTheAuditorReadsTheLogAndChangesNothing.
func TestTheAuditorReadsTheLogAndChangesNothing(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	op := tr.js(t, auth.Identity{Role: auth.Operator, Name: "root"})
	ctx := ctxFor(t)
	env := events.New("job-1", &events.JobRequested{Submitter: "alice"}, "test", time.Now())
	m, err := env.Msg()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	auditor := auth.Identity{Role: auth.Auditor, Name: "auditor"}
	nc := tr.conn(t, auditor)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("the auditor reading the log: %v", err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil || msg.Subject() != events.RequestSubject("job-1", "alice") {
		t.Fatalf("the auditor read %v, %v", msg, err)
	}
	st, err := js.Stream(ctx, events.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetMsg(ctx, 1); err != nil {
		t.Errorf("the auditor's direct get: %v", err)
	}
	for _, s := range []string{
		"$JS.API.STREAM.DELETE." + events.Stream,
		"$JS.API.STREAM.UPDATE." + events.Stream,
		"$JS.API.STREAM.PURGE." + events.Stream,
		"$JS.API.STREAM.MSG.DELETE." + events.Stream,
		"$JS.API.CONSUMER.DELETE." + events.Stream + ".rent",
		"$JS.API.CONSUMER.DURABLE.CREATE." + events.Stream + ".x",
		"$O." + events.DataBucketFor("alice") + ".M.x",
		"$KV." + events.LeasesBucket + ".leader.rent",
		wire.LedgerSubject("alice", wire.EndpointRecord),
		"e31.job.x.requested.auditor",
		"e31.timer.at.expire.x",
	} {
		if !refused(t, nc, s) {
			t.Errorf("the auditor may publish on %s", s)
		}
	}
	if refused(t, nc, wire.LedgerSubject(auth.AuditorName, wire.EndpointList)) {
		t.Error("the auditor may not ask the ledger")
	}
}

// TestCredentialsSayWhoTheyAre: a creds file round-trips, names its
// identity, and connects with that identity's inbox.
func TestCredentialsSayWhoTheyAre(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	id := auth.Identity{Role: auth.Service, Service: auth.RunService, Name: "node-7"}
	creds, err := tr.keys.Issue(id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "node-7.creds")
	if err := creds.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("creds file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	back, err := auth.ReadCreds(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := back.Identity(); err != nil || got != id {
		t.Errorf("identity %+v (%v), want %+v", got, err, id)
	}
	uc, err := back.Claims()
	if err != nil || uc.Expires == 0 || uc.IssuerAccount != tr.keys.NodesAccountKey() {
		t.Errorf("claims %+v (%v): want an expiry, issued for the NODES account", uc, err)
	}
	nc, err := nats.Connect(tr.srv.ClientURL(), nats.UserCredentials(p), nats.CustomInboxPrefix(id.InboxPrefix()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if !strings.HasPrefix(nc.NewInbox(), "_INBOX_service_run_node-7.") {
		t.Errorf("inbox %s", nc.NewInbox())
	}
	// A request and its reply: the inbox is usable.
	if _, err := jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.AccountInfo(ctxFor(t)); err != nil {
		t.Errorf("account info as node-7: %v", err)
	}
}

func TestIdentitiesThatCannotBe(t *testing.T) {
	t.Parallel()
	for _, id := range []auth.Identity{
		{Role: auth.Submitter, Name: "operator"},
		{Role: auth.Submitter, Name: "auditor"},
		{Role: auth.Submitter, Name: "output"},
		{Role: auth.Submitter, Name: "a.b"},
		{Role: auth.Submitter, Name: "*"},
		{Role: auth.Submitter, Name: ""},
		{Role: auth.Service, Service: "billing", Name: "x"},
		{Role: auth.Submitter, Service: "run", Name: "x"},
		{Role: "root", Name: "x"},
	} {
		if err := id.Validate(); !errors.Is(err, auth.ErrIdentity) {
			t.Errorf("%+v: %v, want ErrIdentity", id, err)
		}
		if _, err := auth.Permissions(id); err == nil {
			t.Errorf("%+v has permissions", id)
		}
	}
}

func TestKeysAreMadeOnceAndKeptSecret(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	k1, created, err := auth.InitKeys(dir)
	if err != nil || !created {
		t.Fatalf("first InitKeys: %v %v", created, err)
	}
	k2, created, err := auth.InitKeys(dir)
	if err != nil || created || k1.AccountKey() != k2.AccountKey() || k1.SystemAccountKey() != k2.SystemAccountKey() {
		t.Fatalf("second InitKeys: created %v, %v, or other keys", created, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
	}
	if err := os.Remove(filepath.Join(dir, auth.AccountKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := auth.InitKeys(dir); !errors.Is(err, auth.ErrKeys) {
		t.Errorf("InitKeys with the account key missing: %v, want ErrKeys", err)
	}
}

// TestARevokedUserIsShutOutWithoutARestart: revoking is an account JWT
// update, pushed to the running server.
func TestARevokedUserIsShutOutWithoutARestart(t *testing.T) {
	t.Parallel()
	tr := startTrusted(t)
	alice := auth.Identity{Role: auth.Submitter, Name: "alice"}
	creds, err := tr.keys.Issue(alice, 0)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := creds.Options()
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	nc, err := tr.srv.Connect("alice", append(opts, nats.MaxReconnects(0), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	key, err := creds.UserKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.keys.Revoke(key); err != nil {
		t.Fatal(err)
	}
	if err := auth.Push(ctxFor(t), tr.srv.ClientURL(), tr.keys); err != nil {
		t.Fatalf("push the account JWT: %v", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("alice's connection is still open after her revocation")
	}
	if nc, err := nats.Connect(tr.srv.ClientURL(), opts...); err == nil {
		nc.Close()
		t.Error("alice connected again after her revocation")
	} else if !errors.Is(err, nats.ErrAuthorization) && !errors.Is(err, nats.ErrAuthRevoked) {
		t.Errorf("alice connecting again: %v, want an authorization error", err)
	}
	// Anyone else goes on.
	if _, err := tr.srv.Connect("bob", mustOptions(t, tr, auth.Identity{Role: auth.Submitter, Name: "bob"})...); err != nil {
		t.Errorf("bob after alice's revocation: %v", err)
	}
	// The revocation is kept for the next signing.
	again, err := tr.keys.TenantsJWT()
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(again)
	if err != nil || !ac.IsClaimRevoked(mustClaims(t, creds)) {
		t.Errorf("the TENANTS JWT signed after the revocation does not revoke alice (%v)", err)
	}
}

func mustClaims(t *testing.T, c auth.Creds) *jwt.UserClaims {
	t.Helper()
	uc, err := c.Claims()
	if err != nil {
		t.Fatal(err)
	}
	return uc
}

func mustOptions(t *testing.T, tr *trusted, id auth.Identity) []nats.Option {
	t.Helper()
	creds, err := tr.keys.Issue(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := creds.Options()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// TestTheServerConfigRunsAServer: the config `e31 creds init` writes is
// what a deployed nats-server includes; a server started from it trusts
// the credentials e31 makes, runs JetStream for the account, and takes a
// pushed account update (its resolver is the server's own, "full").
func TestTheServerConfigRunsAServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys, _, err := auth.InitKeys(filepath.Join(dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	snippet, err := keys.ServerConfig(filepath.Join(dir, "jwt"))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	body := fmt.Sprintf("listen: 127.0.0.1:-1\njetstream: {store_dir: %q}\ninclude ./e31-auth.conf\n", filepath.Join(dir, "js"))
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "e31-auth.conf"), []byte(snippet), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("the config does not parse: %v\n%s", err, snippet)
	}
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("the server did not start")
	}
	creds, err := keys.Issue(auth.Identity{Role: auth.Operator, Name: "root"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	copts, err := creds.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), copts...)
	if err != nil {
		t.Fatalf("connect with e31's credentials: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Setup(ctxFor(t), js, events.StreamOptions{}); err != nil {
		t.Fatalf("JetStream for the account: %v", err)
	}
	if err := auth.Push(ctxFor(t), ns.ClientURL(), keys); err != nil {
		t.Errorf("push to a server with a full resolver: %v", err)
	}
	// A submitter, in the TENANTS account the config preloads, reaches the
	// log through its imports.
	alice, err := keys.Issue(auth.Identity{Role: auth.Submitter, Name: "alice"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	aopts, err := alice.Options()
	if err != nil {
		t.Fatal(err)
	}
	anc, err := nats.Connect(ns.ClientURL(), aopts...)
	if err != nil {
		t.Fatalf("connect as alice: %v", err)
	}
	defer anc.Close()
	ajs, err := jetstream.New(anc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := events.New("job-1", &events.JobRequested{Submitter: "alice"}, "test", time.Now()).Msg()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.PublishMsg(ctxFor(t), m); err != nil {
		t.Errorf("alice's job request on a server from the config: %v", err)
	}
}
