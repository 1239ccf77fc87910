package bench

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/broker"
	"github.com/e31net/e31/pkg/connect"
	"github.com/e31net/e31/pkg/events"
)

// logServer is an embedded NATS server in a temporary directory, with
// e31's streams made and sync=interval, for the measures that write a long
// log of their own and time what reads it: writing it durably message by
// message would measure the disk, not the readers.
type logServer struct {
	dir string
	srv *broker.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	// keep keeps dir when the server is closed.
	keep bool
}

// startLogServer starts a logServer in a new directory named for measure.
// Close it, on every path.
func startLogServer(ctx context.Context, measure string, keep bool, opts events.StreamOptions) (*logServer, error) {
	return startLogServerSync(ctx, measure, keep, broker.SyncInterval, opts)
}

// startLogServerSync is startLogServer with the store's durability sync.
func startLogServerSync(ctx context.Context, measure string, keep bool, sync broker.Sync, opts events.StreamOptions) (*logServer, error) {
	dir, err := os.MkdirTemp("", "e31-bench-"+measure+"-")
	if err != nil {
		return nil, err
	}
	s := &logServer{dir: dir, keep: keep}
	fail := func(err error) (*logServer, error) {
		s.Close()
		return nil, fmt.Errorf("%w: %w", ErrNATS, err)
	}
	if s.srv, err = broker.Start(broker.Config{Dir: dir, Sync: sync, Name: "bench"}); err != nil {
		return fail(err)
	}
	if s.nc, err = s.srv.Connect("bench"); err != nil {
		return fail(err)
	}
	if s.js, err = connect.Ready(ctx, s.nc); err != nil {
		return fail(err)
	}
	if err := events.Setup(ctx, s.js, opts); err != nil {
		return fail(err)
	}
	return s, nil
}

// Close stops the server and, unless it is kept, removes its directory.
func (s *logServer) Close() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.srv != nil {
		// Shutdown closes the server's connections and waits for its
		// goroutines; its error says only that it was already down.
		_ = s.srv.Shutdown(context.Background())
	}
	if !s.keep {
		_ = os.RemoveAll(s.dir)
	}
}
