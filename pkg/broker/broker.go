// Package broker runs an embedded NATS JetStream server for one machine: the
// bus of `e31 dev` and of every test. Durability is an explicit choice here,
// never a default inherited by accident; so is authentication (Config.Trust).
package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/auth"
)

// Sync says when the file store forces writes to disk.
type Sync string

const (
	// SyncAlways fsyncs every stored message before acknowledging it: an
	// acknowledged event survives a machine crash. The default.
	SyncAlways Sync = "always"
	// SyncInterval fsyncs every two minutes (nats-server's own default): much
	// faster, but a machine crash can lose acknowledged events. A process crash
	// loses nothing either way: the data is in the page cache.
	SyncInterval Sync = "interval"
)

// ErrSync is returned for a Sync value that is neither "always" nor "interval".
var ErrSync = errors.New("broker: sync must be \"always\" or \"interval\"")

// Config describes the embedded server.
type Config struct {
	// Dir holds the JetStream file store. Required.
	Dir string
	// Listen is host:port for clients; port 0 (or "") picks a free one.
	Listen string
	// Sync is the durability choice; empty means SyncAlways.
	Sync Sync
	// Name is the server name; it must stay the same across restarts on Dir.
	Name string
	// Trust, when set, runs the server in operator mode: every client must
	// present credentials signed for an account Trust preloads, and is held
	// to the permissions they carry (see pkg/auth). Nil runs an open server
	// where anyone may do anything: for tests of one service.
	Trust *auth.Trust
}

// Server is a running embedded NATS server.
type Server struct {
	ns *server.Server
}

// Start starts the server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("broker: Dir is required")
	}
	switch cfg.Sync {
	case "":
		cfg.Sync = SyncAlways
	case SyncAlways, SyncInterval:
	default:
		return nil, fmt.Errorf("%w, got %q", ErrSync, cfg.Sync)
	}
	host, port := "127.0.0.1", -1
	if cfg.Listen != "" {
		h, p, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("broker: listen address %q: %w", cfg.Listen, err)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("broker: listen port %q: %w", p, err)
		}
		if n == 0 {
			n = -1
		}
		host, port = h, n
	}
	name := cfg.Name
	if name == "" {
		name = "e31-dev"
	}
	opts := &server.Options{
		ServerName: name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.Dir,
		SyncAlways: cfg.Sync == SyncAlways,
		NoSigs:     true,
		NoLog:      true,
		// Jobs carry up to 256 KiB of declaration; data moves in 128 KiB chunks.
		MaxPayload: 1 << 20,
	}
	if t := cfg.Trust; t != nil {
		oc, err := jwt.DecodeOperatorClaims(t.OperatorJWT)
		if err != nil {
			return nil, fmt.Errorf("broker: operator JWT: %w", err)
		}
		// A memory resolver holds the preloaded accounts: an account
		// changes when the server is given a new JWT for it.
		res := &server.MemAccResolver{}
		for key, accountJWT := range t.Accounts {
			if err := res.Store(key, accountJWT); err != nil {
				return nil, fmt.Errorf("broker: account %s: %w", key, err)
			}
		}
		opts.TrustedOperators = []*jwt.OperatorClaims{oc}
		opts.SystemAccount = t.SystemAccount
		opts.AccountResolver = res
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("broker: server did not become ready within 30s")
	}
	return &Server{ns: ns}, nil
}

// ClientURL is where clients connect, e.g. nats://127.0.0.1:4222.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Connect opens an in-process connection (no TCP) named name.
func (s *Server) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.Name(name), nats.InProcessServer(s.ns), nats.MaxReconnects(-1)}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: connect %s: %w", name, err)
	}
	return nc, nil
}

// Shutdown stops the server and waits until it has, or until ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.ns.Shutdown()
	done := make(chan struct{})
	go func() { s.ns.WaitForShutdown(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("broker: shutdown: %w", ctx.Err())
	}
}
