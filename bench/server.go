package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

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
	// apart is the server's process, when it runs in one of its own
	// (startLogServerApart) rather than in this one (srv).
	apart *child
	nc    *nats.Conn
	js    jetstream.JetStream
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
	return newLogServer(ctx, measure, keep, opts, func(s *logServer) (err error) {
		if s.srv, err = broker.Start(broker.Config{Dir: s.dir, Sync: sync, Name: "bench"}); err != nil {
			return err
		}
		s.nc, err = s.srv.Connect("bench")
		return err
	})
}

// newLogServer makes a new directory named for measure, has start start a
// server there and connect s.nc to it, and makes e31's streams.
func newLogServer(ctx context.Context, measure string, keep bool, opts events.StreamOptions, start func(s *logServer) error) (*logServer, error) {
	dir, err := os.MkdirTemp("", "e31-bench-"+measure+"-")
	if err != nil {
		return nil, err
	}
	s := &logServer{dir: dir, keep: keep}
	err = start(s)
	if err == nil {
		s.js, err = connect.Ready(ctx, s.nc)
	}
	if err == nil {
		err = events.Setup(ctx, s.js, opts)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: %w", ErrNATS, err)
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
	if s.apart != nil {
		if err := s.apart.stop(nil); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
	}
	if !s.keep {
		_ = os.RemoveAll(s.dir)
	}
}

// serverEnv, set in the environment of a process of e31 (or of a test
// binary of this package), makes it a bench's NATS server (MaybeChild)
// rather than what it was started as: JSON of serverArgs.
const serverEnv = "E31_BENCH_SERVER"

// serverArgs are what a server's process is told: where it keeps its
// store, how it syncs it, and where it writes a CPU profile of its whole
// life, if anywhere.
type serverArgs struct {
	Dir        string      `json:"dir"`
	Sync       broker.Sync `json:"sync"`
	CPUProfile string      `json:"cpu_profile,omitempty"`
}

// serverReady is the first line a server's process writes: where to
// connect.
type serverReady struct {
	URL string `json:"url"`
}

// runServer is a server's process (MaybeChild): it serves spec's store
// (serverArgs) on a free port of 127.0.0.1, says where on its first line,
// and shuts down when ctx ends.
func runServer(ctx context.Context, spec []byte) (any, error) {
	var a serverArgs
	if err := json.Unmarshal(spec, &a); err != nil {
		return nil, err
	}
	stopProfile, err := startCPUProfile(a.CPUProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	srv, err := broker.Start(broker.Config{Dir: a.Dir, Sync: a.Sync, Name: "bench", Listen: "127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	line, _ := json.Marshal(serverReady{URL: srv.ClientURL()})
	fmt.Println(string(line))
	<-ctx.Done()
	return struct{}{}, srv.Shutdown(context.Background())
}

// startLogServerApart is startLogServer with the server in a process of
// its own, as a deployment runs it, connected to over TCP: what a service
// allocates then makes its own collector mark only its own heap, not the
// server's index of every subject of the log too, and the figures of each
// are apart (cpu). Its CPU profile, if profile is set, is written to
// profile when it is closed.
func startLogServerApart(ctx context.Context, measure string, keep bool, opts events.StreamOptions, profile string) (*logServer, error) {
	return newLogServer(ctx, measure, keep, opts, func(s *logServer) (err error) {
		if s.apart, err = startChild("the NATS server's process", serverEnv, serverArgs{Dir: s.dir, Sync: broker.SyncInterval, CPUProfile: profile}); err != nil {
			return err
		}
		line, err := s.apart.firstLine(time.Minute)
		if err != nil {
			return err
		}
		var ready serverReady
		if err := json.Unmarshal([]byte(line), &ready); err != nil {
			return fmt.Errorf("the server's first line %q: %w", line, err)
		}
		s.nc, err = nats.Connect(ready.URL, nats.Name("bench"), nats.MaxReconnects(-1))
		return err
	})
}

// serverCPU is the CPU time the server has used so far, if it runs apart
// (0 otherwise: it is this process's).
func (s *logServer) serverCPU() (time.Duration, error) {
	if s.apart == nil {
		return 0, nil
	}
	return s.apart.cpu()
}
