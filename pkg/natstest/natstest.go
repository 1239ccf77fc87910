// Package natstest gives a test its own real NATS JetStream server, in a
// temporary directory, with the e31 streams set up.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/events"
)

// Server is a test's embedded server.
type Server struct {
	*broker.Server
	Dir string
	tb  testing.TB
}

// Start runs a server for tb and shuts it down when the test ends. Tests run
// with SyncInterval: durability against machine crashes is not what they test,
// and fsync per message would only make them slower.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartIn(tb, tb.TempDir())
}

// StartIn runs a server on dir, so that a test can stop one and start another
// on the same store.
func StartIn(tb testing.TB, dir string) *Server {
	tb.Helper()
	s, err := broker.Start(broker.Config{Dir: dir, Sync: broker.SyncInterval, Name: "natstest"})
	if err != nil {
		tb.Fatalf("natstest: %v", err)
	}
	srv := &Server{Server: s, Dir: dir, tb: tb}
	tb.Cleanup(srv.Stop)
	return srv
}

// Stop shuts the server down; calling it twice is harmless.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
}

// Conn connects to the server and closes the connection when the test ends.
func (s *Server) Conn(tb testing.TB) *nats.Conn {
	tb.Helper()
	nc, err := s.Connect(tb.Name())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// LeftBySourcing is the function of a goroutine nats-server leaves
// running after it shut down, for up to 30 s, when a stream's source was
// still being set up (the leases bucket sources the nodes' leases,
// events.Setup): a test that shuts a server down right after it started
// tells goleak to ignore it.
const LeftBySourcing = "github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3"

// JetStream connects and sets up the e31 streams.
func (s *Server) JetStream(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(s.Conn(tb))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := events.Setup(ctx, js, events.StreamOptions{}); err != nil {
		tb.Fatal(err)
	}
	// Jobs keep their data in their submitter's bucket; tests that use one
	// store for all use this one.
	if _, err := js.CreateOrUpdateObjectStore(ctx, events.DataBucketConfig(events.StreamOptions{})); err != nil {
		tb.Fatal(err)
	}
	return js
}

// Context is a context for one test, cancelled when it ends or after d.
func Context(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// RefuseWrites makes stream refuse every message stored on it from now on
// (no message fits its largest size, one byte), as a cluster answers every
// write with an error while it elects the stream's leader, but without
// losing anything: allow lets writes through again.
func RefuseWrites(ctx context.Context, tb testing.TB, js jetstream.JetStream, stream string) (allow func()) {
	tb.Helper()
	setMaxMsgSize := func(size int32) {
		tb.Helper()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			tb.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.MaxMsgSize = size
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			tb.Fatal(err)
		}
	}
	setMaxMsgSize(1)
	return func() { setMaxMsgSize(-1) }
}

// LeaseTTL sets the lease time of the leases bucket and of the nodes'
// bucket that it sources (events.NodeLeaseTTL of it) to ttl, for a test
// that needs leases to lapse in seconds: Start sets them up at the
// default, and a node renews in the nodes' bucket, where RENT sees it
// lapse in the leases bucket.
func LeaseTTL(ctx context.Context, tb testing.TB, js jetstream.JetStream, ttl time.Duration) jetstream.KeyValue {
	tb.Helper()
	o := events.StreamOptions{LeaseTTL: ttl}
	if _, err := js.UpdateStream(ctx, events.LeasesStreamConfig(o)); err != nil {
		tb.Fatal(err)
	}
	if _, err := js.UpdateStream(ctx, events.NodeLeasesStreamConfig(o)); err != nil {
		tb.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, events.LeasesBucket)
	if err != nil {
		tb.Fatal(err)
	}
	return kv
}
