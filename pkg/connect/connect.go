// Package connect opens e31's connection to NATS the same way everywhere: a
// named connection that reconnects for ever, and a JetStream handle that is
// usable (a fresh cluster may not have elected its meta leader yet).
package connect

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
)

// DefaultURL is where e31 looks for NATS when nothing else is said.
const DefaultURL = "nats://127.0.0.1:4222"

// Config says how to reach NATS.
type Config struct {
	URL   string
	Creds string
	Name  string
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
	}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
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

// Ready returns a JetStream handle once the server answers JetStream calls.
func Ready(ctx context.Context, nc *nats.Conn) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := events.WaitReady(ctx, js); err != nil {
		return nil, err
	}
	return js, nil
}
