package auth

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Tags on a user JWT that say which e31 identity it is, so that a client
// holding only its credentials knows its name and role (which subjects and
// inbox to use). The server does not read them: what it enforces is the
// permissions, which say the same.
const (
	tagRole    = "e31-role:"
	tagService = "e31-service:"
)

// ErrCreds is wrapped by errors about credentials that cannot be used.
var ErrCreds = errors.New("auth: credentials")

// Creds are one user's credentials: its JWT and the seed of its key.
type Creds struct {
	JWT  string
	Seed []byte
}

// File is the credentials in the .creds format nats.go and the nats CLI
// read.
func (c Creds) File() ([]byte, error) {
	b, err := jwt.FormatUserConfig(c.JWT, c.Seed)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCreds, err)
	}
	return b, nil
}

// WriteFile writes the credentials to path, readable by its owner only.
func (c Creds) WriteFile(path string) error {
	b, err := c.File()
	if err != nil {
		return err
	}
	if err := writeSecret(path, b); err != nil {
		return fmt.Errorf("%w: %w", ErrCreds, err)
	}
	return nil
}

// ParseCreds reads credentials in the .creds format.
func ParseCreds(b []byte) (Creds, error) {
	t, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return Creds{}, fmt.Errorf("%w: %w", ErrCreds, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		return Creds{}, fmt.Errorf("%w: %w", ErrCreds, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return Creds{}, fmt.Errorf("%w: %w", ErrCreds, err)
	}
	return Creds{JWT: t, Seed: seed}, nil
}

// ReadCreds reads a .creds file.
func ReadCreds(path string) (Creds, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Creds{}, fmt.Errorf("%w: %w", ErrCreds, err)
	}
	c, err := ParseCreds(b)
	if err != nil {
		return Creds{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Claims decodes the user JWT.
func (c Creds) Claims() (*jwt.UserClaims, error) {
	uc, err := jwt.DecodeUserClaims(c.JWT)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCreds, err)
	}
	return uc, nil
}

// UserKey is the user's public key: what Keys.Revoke takes.
func (c Creds) UserKey() (string, error) {
	uc, err := c.Claims()
	if err != nil {
		return "", err
	}
	return uc.Subject, nil
}

// ErrNotE31 means credentials were not made by e31 (they carry no e31
// role): they may work, but say nothing of who they are.
var ErrNotE31 = errors.New("auth: credentials name no e31 identity")

// Identity is who the credentials say they are.
func (c Creds) Identity() (Identity, error) {
	uc, err := c.Claims()
	if err != nil {
		return Identity{}, err
	}
	id := Identity{Name: uc.Name}
	for _, t := range uc.Tags {
		if r, ok := strings.CutPrefix(t, tagRole); ok {
			id.Role = Role(r)
		}
		if s, ok := strings.CutPrefix(t, tagService); ok {
			id.Service = s
		}
	}
	if id.Role == "" {
		return Identity{}, ErrNotE31
	}
	if err := id.Validate(); err != nil {
		return Identity{}, fmt.Errorf("%w: %w", ErrCreds, err)
	}
	return id, nil
}

// Options are the nats.go options to connect with the credentials: the JWT
// and a signature with the seed, and the identity's own inbox prefix (the
// only one it may subscribe to).
func (c Creds) Options() ([]nats.Option, error) {
	kp, err := nkeys.FromSeed(c.Seed)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCreds, err)
	}
	opts := []nats.Option{nats.UserJWT(
		func() (string, error) { return c.JWT, nil },
		func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) },
	)}
	id, err := c.Identity()
	switch {
	case err == nil:
		opts = append(opts, nats.CustomInboxPrefix(id.InboxPrefix()))
	case !errors.Is(err, ErrNotE31):
		return nil, err
	}
	return opts, nil
}

// MayServe refuses, before anything is done, an identity that is not the
// operator nor the given service (for run, on the given node): the server
// would refuse what the service does, one publish at a time. The page
// ("web") reads the log and the pool as the operator only.
func (id Identity) MayServe(service, node string) error {
	switch {
	case id.Role == Operator:
	case service == "web":
		return fmt.Errorf("are those of %s: the page reads the log and the pool as the operator", id)
	case id.Role != Service || id.Service != service:
		return fmt.Errorf("are those of %s, not of the %s service", id, service)
	case service == RunService && id.Name != node:
		return fmt.Errorf("are node %s's; --node is %s", id.Name, node)
	}
	return nil
}
