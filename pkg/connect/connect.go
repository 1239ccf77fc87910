// Package connect opens e31's connection to NATS the same way everywhere: a
// named connection that reconnects for ever, authenticated with the
// credentials given and replying on the inbox of the identity they name, and
// a JetStream handle that is usable (a fresh cluster may not have elected
// its meta leader yet).
package connect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/events"
)

// DefaultURL is where e31 looks for NATS when nothing else is said.
const DefaultURL = "nats://127.0.0.1:4222"

// Config says how to reach NATS.
type Config struct {
	URL string
	// Creds is a credentials file (`e31 creds user`, or DIR/creds of `e31
	// dev`); "" connects without.
	Creds string
	// CA is a PEM file of the authority that signed the servers' TLS
	// certificates: with it the connection is TLS, and the server must
	// prove it is one of them. "" trusts the system's authorities when the
	// server asks for TLS (a tls:// URL), and connects in the clear if not.
	CA   string
	Name string
	// Logger reports disconnects and reconnects; nil keeps quiet.
	Logger *slog.Logger
}

// Dial connects and waits until JetStream answers or ctx ends.
func Dial(ctx context.Context, cfg Config) (*nats.Conn, jetstream.JetStream, error) {
	if cfg.URL == "" {
		cfg.URL = DefaultURL
	}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
	}
	sec, err := SecurityOptions(cfg)
	if err != nil {
		return nil, nil, err
	}
	opts = append(opts, sec...)
	if log := cfg.Logger; log != nil {
		opts = append(opts,
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("nats disconnected", "err", err) }),
			nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrl()) }),
		)
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w", cfg.URL, err)
	}
	js, err := Ready(ctx, nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("connect to %s: %w", cfg.URL, err)
	}
	return nc, js, nil
}

// SecurityOptions are the options that authenticate with cfg.Creds, if
// set, and verify the server with cfg.CA, if set. The credentials are read
// again on every reconnect, so that a renewed file is picked up; replies
// come to the inbox prefix of the identity they name, the only one that
// identity may subscribe to.
func SecurityOptions(cfg Config) ([]nats.Option, error) {
	var opts []nats.Option
	if cfg.CA != "" {
		opts = append(opts, nats.RootCAs(cfg.CA))
	}
	if cfg.Creds == "" {
		return opts, nil
	}
	c, err := auth.ReadCreds(cfg.Creds)
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.UserCredentials(cfg.Creds))
	id, err := c.Identity()
	switch {
	case err == nil:
		opts = append(opts, nats.CustomInboxPrefix(id.InboxPrefix()))
	case !errors.Is(err, auth.ErrNotE31):
		return nil, err
	}
	return opts, nil
}

// How long a connection that went silent is believed: a ping every
// PingInterval, and the connection is given up (and made again, to any
// server that answers) once MaxPingsOut of them are unanswered, so within
// about PingInterval × (MaxPingsOut+1), 15 s. nats.go's defaults (two
// minutes, two pings) let a connection through a network that drops
// packets without closing it (a real partition) look alive for six
// minutes, and every request on it wait out its own deadline meanwhile. A
// node does not rely on it to stop its jobs (it fences on its own clock,
// pkg/lease); it bounds how soon the node, and every service, tries
// another route.
const (
	PingInterval = 5 * time.Second
	MaxPingsOut  = 2
)

// PublishWait is how long an async publish waits for its ack: far past
// what a store takes under load (milliseconds, seconds in a burst of
// thousands), short enough that a lost ack stalls no service for long.
const PublishWait = 30 * time.Second

// Ready returns a JetStream handle once the server answers JetStream calls.
//
// Its async publishes give up after PublishWait. Without a timeout of its
// own (nats.go sets none), a publish whose ack was lost with a stream
// leader (a NATS server killed with it in flight) waited for ever, and so
// did whatever waited on it: RENT's scheduler, appending its decisions,
// stood still and logged nothing. Given up on, the append fails, is tried
// again, and the event's deterministic id makes a second store of it a
// duplicate.
func Ready(ctx context.Context, nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(PublishWait))
	if err != nil {
		return nil, err
	}
	if err := events.WaitReady(ctx, js); err != nil {
		return nil, err
	}
	return js, nil
}
