package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/e31net/e31/pkg/client"
)

// clientConfig is how a user's command connects: as connectConfig says,
// and, given no credentials, with those an `e31 dev` on this machine wrote
// for the OS user, if that is the server it talks to.
func (a *app) clientConfig(name string) client.Config {
	cfg := a.connectConfig(name)
	return client.Config{URL: cfg.URL, Creds: cfg.Creds, CA: cfg.CA, Name: name, User: a.env.User, ConfigDir: a.env.ConfigDir, Logger: a.log}
}

// dial connects, failing fast with advice when nothing answers.
func (a *app) dial(ctx context.Context) (*client.Client, error) {
	cfg := a.clientConfig("e31-cli").Resolve()
	c, err := client.Connect(ctx, cfg)
	switch {
	case errors.Is(err, client.ErrCredentials):
		return nil, usageErr("--creds: %v", err)
	case errors.Is(err, client.ErrAuthentication) && cfg.Creds == "":
		return nil, troubleErr(fmt.Errorf("%v: give credentials with --creds or E31_CREDS ('e31 dev' writes them into DIR/creds)", err))
	case errors.Is(err, client.ErrUnreachable):
		return nil, troubleErr(fmt.Errorf("%v (is 'e31 dev' running? set --nats or E31_NATS)", err))
	case err != nil:
		return nil, troubleErr(err)
	}
	return c, nil
}

// with runs fn with a connection that closes when fn returns: every
// command that talks to e31 does it so, after checking its flags.
func (a *app) with(ctx context.Context, fn func(*client.Client) error) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// exitCodeOf is the exit code of an error of the client library: bad
// input and refusals are the user's to fix, a job without logs or output
// did not succeed, the rest is trouble.
func exitCodeOf(err error) int {
	for _, usage := range []error{client.ErrInvalid, client.ErrNotPermitted, client.ErrCredentials, client.ErrFull} {
		if errors.Is(err, usage) {
			return exitUsage
		}
	}
	if errors.Is(err, client.ErrNoLogs) || errors.Is(err, client.ErrNoOutput) {
		return exitFailed
	}
	return exitTrouble
}
