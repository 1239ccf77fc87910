package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/events"
)

// TestCredsRevokeAndPushShutOutASubmitter: a submitter's credentials, in
// the TENANTS account, work against a server that trusts the keys of
// `e31 creds init`; `e31 creds revoke` and `e31 creds push` close its
// connection and refuse it from then on, while a service goes on.
func TestCredsRevokeAndPushShutOutASubmitter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keysDir := filepath.Join(dir, "keys")
	out, errOut, code := execute3("creds", "init", "--dir", keysDir)
	if code != 0 || !strings.Contains(out, auth.TenantsAccountName) {
		t.Fatalf("creds init: exit %d, no %s account named: %s %s", code, auth.TenantsAccountName, out, errOut)
	}
	keys, err := auth.LoadKeys(keysDir)
	if err != nil {
		t.Fatal(err)
	}
	trust, err := keys.Trust()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.Start(broker.Config{Dir: t.TempDir(), Sync: broker.SyncInterval, Name: "credstest", Trust: &trust})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dana, node := filepath.Join(dir, "dana.creds"), filepath.Join(dir, "node-1.creds")
	for _, args := range [][]string{
		{"creds", "user", "--dir", keysDir, "--role", "submitter", "--name", "dana", "-o", dana},
		{"creds", "user", "--dir", keysDir, "--role", "service", "--service", "run", "--name", "node-1", "-o", node},
	} {
		if _, errOut, code := execute3(args...); code != 0 {
			t.Fatalf("e31 %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
	}
	connect := func(file string, more ...nats.Option) (*nats.Conn, error) {
		creds, err := auth.ReadCreds(file)
		if err != nil {
			t.Fatal(err)
		}
		opts, err := creds.Options()
		if err != nil {
			t.Fatal(err)
		}
		return nats.Connect(srv.ClientURL(), append(append(opts, nats.MaxReconnects(0),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})), more...)...)
	}
	closed := make(chan struct{})
	nc, err := connect(dana, nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatalf("dana connects: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("dana asks JetStream through the TENANTS imports: %v", err)
	}
	nodeNC, err := connect(node)
	if err != nil {
		t.Fatalf("node-1 connects: %v", err)
	}
	defer nodeNC.Close()

	if out, errOut, code := execute3("creds", "revoke", "--dir", keysDir, "--file", dana); code != 0 || !strings.Contains(out, auth.TenantsJWTFile) {
		t.Fatalf("creds revoke of a submitter: exit %d: %s %s", code, out, errOut)
	}
	if out, errOut, code := execute3("creds", "push", "--dir", keysDir, "--nats", srv.ClientURL()); code != 0 || !strings.Contains(out, auth.TenantsAccountName) {
		t.Fatalf("creds push: exit %d: %s %s", code, out, errOut)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("dana's connection is still open after her revocation was pushed")
	}
	if nc, err := connect(dana); err == nil {
		nc.Close()
		t.Error("dana connected again after her revocation")
	}
	// Everyone else goes on: the node still publishes its announcement.
	njs, err := jetstream.New(nodeNC)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Setup(ctx, mustOperatorJS(t, srv, keys), events.StreamOptions{}); err != nil {
		t.Fatal(err)
	}
	m, err := events.New("node-1", &events.NodeAnnounced{Node: "node-1"}, "test", time.Now()).Msg()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := njs.PublishMsg(ctx, m); err != nil {
		t.Errorf("node-1 after dana's revocation: %v", err)
	}
}

// mustOperatorJS connects to srv as an operator of keys.
func mustOperatorJS(t *testing.T, srv *broker.Server, keys *auth.Keys) jetstream.JetStream {
	t.Helper()
	creds, err := keys.Issue(auth.Identity{Role: auth.Operator, Name: "root"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := creds.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect("operator", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
