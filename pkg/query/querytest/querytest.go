// Package querytest plays a hostile tenant against e31's query services on
// a real server with authentication on: a plain nats.go client holding
// nothing but a submitter's credentials, which names the reply subjects of
// its requests itself. Each service's tests run it against their own
// endpoints (the ledger's, RENT's why, OUTPUT's stored), with the service
// connected under its own credentials, so that the server's response
// permissions would let a misdirected answer through: what stops it is
// pkg/query, and for a submitter, who asks from the TENANTS account through
// its import, the account boundary as well (pkg/auth): the service sees
// the server's own reply and the answer lands inside TENANTS.
package querytest

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
)

// Server is a real JetStream server in operator mode, with e31's streams
// set up and the data buckets of alice and bob made, as `e31 dev --users
// alice,bob` leaves it.
type Server struct {
	*broker.Server
	Keys *auth.Keys
}

// Start runs a Server for tb and shuts it down when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	keys, _, err := auth.InitKeys(filepath.Join(tb.TempDir(), "keys"))
	if err != nil {
		tb.Fatal(err)
	}
	trust, err := keys.Trust()
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := broker.Start(broker.Config{Dir: tb.TempDir(), Sync: broker.SyncInterval, Name: "querytest", Trust: &trust})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	s := &Server{Server: srv, Keys: keys}
	js := s.JetStream(tb, Operator)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
		tb.Fatal(err)
	}
	for _, u := range []string{"alice", "bob"} {
		if _, err := stage.OpenBucket(ctx, js, u); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// Identities the tests use.
var (
	Operator = auth.Identity{Role: auth.Operator, Name: "root"}
	Auditor  = auth.Identity{Role: auth.Auditor, Name: "audit-1"}
)

// Submitter is the identity of submitter name.
func Submitter(name string) auth.Identity { return auth.Identity{Role: auth.Submitter, Name: name} }

// Service is the identity of an instance of service.
func Service(service string) auth.Identity {
	return auth.Identity{Role: auth.Service, Service: service, Name: service + "-1"}
}

// Conn connects as id, with its credentials and its own inbox prefix, as
// e31's clients and services do, and closes when the test ends.
func (s *Server) Conn(tb testing.TB, id auth.Identity) *nats.Conn {
	tb.Helper()
	creds, err := s.Keys.Issue(id, 0)
	if err != nil {
		tb.Fatal(err)
	}
	opts, err := creds.Options()
	if err != nil {
		tb.Fatal(err)
	}
	// What the server refuses is no failure here; nats.go's default
	// handler would print each refusal.
	opts = append(opts, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	nc, err := s.Connect(id.String(), opts...)
	if err != nil {
		tb.Fatalf("connect as %s: %v", id, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// JetStream connects as id.
func (s *Server) JetStream(tb testing.TB, id auth.Identity) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(s.Conn(tb, id))
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// VictimJob is the job whose event subject a hostile reply names.
const VictimJob = "victim-job"

// HostileReplies are the reply subjects a submitter might name to make a
// service publish where it may not: a node's lease key, another tenant's
// object store, an event subject of the log, the JetStream API, other
// identities' inboxes. No request with one of them (or with none) may be
// answered. (A reply subject with a wildcard nats.go will not send; the
// layer refuses it as well: see query.ReplyAllowed's tests.)
func HostileReplies(tb testing.TB) []string {
	tb.Helper()
	submitted, err := events.SubjectOf(VictimJob, &events.JobSubmitted{})
	if err != nil {
		tb.Fatal(err)
	}
	return []string{
		"$KV." + events.LeasesBucket + ".node.x",
		"$O." + events.DataBucketFor("bob") + ".M.eA",
		submitted,
		"$JS.API.STREAM.INFO." + events.Stream,
		Submitter("bob").InboxPrefix() + ".x",
		Operator.InboxPrefix() + ".x",
		Service(auth.RentService).InboxPrefix() + ".x",
	}
}

// AssertNothingLands sends, as asker (a connection made with Conn), a
// request on subject with body for every reply subject of HostileReplies
// and one with no reply subject, and fails the test if anything is
// published on any of them, if the log or the leases change, or if
// refused (the service's count of refused requests) did not move by one
// for each. A last request on asker's own inbox must be answered: the
// service is alive, and has seen every hostile request before it (one
// connection's messages reach a subscription in order).
func (s *Server) AssertNothingLands(tb testing.TB, asker *nats.Conn, subject string, body []byte, refused func() uint64) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	op := s.Conn(tb, Operator)
	all, err := op.SubscribeSync(">")
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = all.Unsubscribe() }()
	if err := op.Flush(); err != nil {
		tb.Fatal(err)
	}
	js, err := jetstream.New(op)
	if err != nil {
		tb.Fatal(err)
	}
	lastSeq := func() uint64 {
		st, err := js.Stream(ctx, events.Stream)
		if err != nil {
			tb.Fatal(err)
		}
		return st.CachedInfo().State.LastSeq
	}
	logged := lastSeq()

	targets := HostileReplies(tb)
	before := refused()
	for _, reply := range targets {
		if err := asker.PublishRequest(subject, reply, body); err != nil {
			tb.Fatalf("%s with reply %s: %v", subject, reply, err)
		}
	}
	if err := asker.Publish(subject, body); err != nil {
		tb.Fatal(err)
	}
	if _, err := asker.RequestWithContext(ctx, subject, body); err != nil {
		tb.Fatalf("%s asked on its own inbox: %v", subject, err)
	}
	// The server itself refuses a client's request whose reply subject is
	// JetStream's API (a reserved reply): that one may never reach the
	// service. Every other one must, and be counted.
	most := uint64(len(targets) + 1)
	least := most - uint64(len(slices.DeleteFunc(slices.Clone(targets), func(s string) bool { return !strings.HasPrefix(s, "$JS.") })))
	if user := wire.UserOf(subject); user != auth.AuditorName && user != events.Operator {
		// A submitter asks through the TENANTS account's import: the
		// service sees the server's own reply (_R_.…) and may answer it,
		// and the answer goes back to the named reply inside TENANTS,
		// where nothing stores it. Only the request with no reply at all
		// is the service's to refuse.
		least, most = 1, 1
	}
	if got := refused() - before; got < least || got > most {
		tb.Errorf("%s: %d requests counted as refused, want %d to %d", subject, got, least, most)
	}

	// Everything published before the answer came has reached op's
	// subscription once op's own message after it has.
	barrier := "querytest.barrier." + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)
	if err := op.Publish(barrier, nil); err != nil {
		tb.Fatal(err)
	}
	for {
		m, err := all.NextMsgWithContext(ctx)
		if err != nil {
			tb.Fatalf("waiting for the barrier: %v", err)
		}
		if m.Subject == barrier {
			break
		}
		// An answer is published with no reply subject of its own; the
		// services' own calls to the JetStream API carry one.
		if slices.Contains(targets, m.Subject) && m.Reply == "" {
			tb.Errorf("%s: a hostile reply subject got a message: %s %q", subject, m.Subject, m.Data)
		}
	}
	if now := lastSeq(); now != logged {
		tb.Errorf("%s: the log moved from #%d to #%d", subject, logged, now)
	}
	kv, err := js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := kv.Get(ctx, "node.x"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		tb.Errorf("%s: lease node.x: %v, want none", subject, err)
	}
}

// WaitServed asks on subject, as nc's identity, until a service answers,
// and fails the test if none does within 20 s: a service registers its
// endpoints only once it has started.
func WaitServed(tb testing.TB, nc *nats.Conn, subject string, body []byte) *nats.Msg {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		m, err := nc.RequestWithContext(ctx, subject, body)
		if err == nil {
			return m
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			tb.Fatalf("%s: %v", subject, err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			tb.Fatalf("%s: nothing answers", subject)
		}
	}
}
