package connect

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// A running `e31 dev` notes where its state is, per address it listens
// on, in the user's configuration folder, so that the CLI of the same
// user, given no credentials, finds the ones `e31 dev` wrote for them.
// This is for one machine only: a deployed system's credentials stay
// explicit (--creds, E31_CREDS), and a URL that no `e31 dev` noted finds
// nothing.

// devNotes is the folder, under the user's configuration folder, that
// holds one note per address an `e31 dev` listens on.
const devNotes = "e31/dev"

// NoteDev records that an `e31 dev` with its state in stateDir listens on
// listen (host:port). configDir is the user's configuration folder
// (os.UserConfigDir).
func NoteDev(configDir, listen, stateDir string) error {
	key, err := devKey(listen)
	if err != nil {
		return err
	}
	dir := filepath.Join(configDir, devNotes)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("note e31 dev: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, key), []byte(stateDir+"\n"), 0o600); err != nil {
		return fmt.Errorf("note e31 dev: %w", err)
	}
	return nil
}

// DevCreds finds the credentials an `e31 dev` listening at natsURL wrote
// for user: its state folder's creds/USER.creds. It returns "" and no
// error when no `e31 dev` noted that address or it wrote none for user.
func DevCreds(configDir, natsURL, user string) (string, error) {
	if natsURL == "" {
		natsURL = DefaultURL
	}
	// A URL list names several servers: a deployment, never `e31 dev`.
	if strings.Contains(natsURL, ",") {
		return "", nil
	}
	u, err := url.Parse(natsURL)
	if err != nil || u.Host == "" {
		return "", nil
	}
	key, err := devKey(u.Host)
	if err != nil {
		return "", nil
	}
	b, err := os.ReadFile(filepath.Join(configDir, devNotes, key))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find e31 dev credentials: %w", err)
	}
	creds := filepath.Join(strings.TrimSpace(string(b)), "creds", user+".creds")
	if _, err := os.Stat(creds); err != nil {
		return "", nil
	}
	return creds, nil
}

// devKey names the note of an address: the loopback and any-address
// forms of one port are the same server to a client on this machine.
func devKey(hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		// nats://localhost without a port is the default port.
		host, port = hostport, "4222"
	}
	switch host {
	case "", "localhost", "0.0.0.0", "::", "::1", "127.0.0.1":
		host = "127.0.0.1"
	}
	if port == "" || strings.ContainsAny(host+port, "/\\") {
		return "", fmt.Errorf("note e31 dev: bad address %q", hostport)
	}
	return host + "_" + port, nil
}
