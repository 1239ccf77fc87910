package auth_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"

	"github.com/e31net/e31/pkg/auth"
)

// TestIdentityAndRevocationByFile: the identity of a credentials file is
// read back, and revoking by its file voids its user in the JWT that the
// keys sign next.
func TestIdentityAndRevocationByFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	keys, _, err := auth.InitKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	alice := auth.Identity{Role: auth.Submitter, Name: "alice"}
	creds, err := keys.Issue(alice, 0)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "alice.creds")
	if err := creds.WriteFile(file); err != nil {
		t.Fatal(err)
	}
	if id, err := auth.ReadIdentity(file); err != nil || id != alice {
		t.Errorf("ReadIdentity: %v, %v; want %v", id, err, alice)
	}
	if _, err := auth.ReadIdentity(filepath.Join(dir, "none.creds")); !errors.Is(err, auth.ErrCreds) {
		t.Errorf("no file: %v, want ErrCreds", err)
	}
	key, err := auth.RevokeIn(dir, file, "")
	if want, _ := creds.UserKey(); err != nil || key != want {
		t.Fatalf("RevokeIn: %q, %v; want %q", key, err, want)
	}
	reloaded, err := auth.LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	tenants, err := reloaded.TenantsJWT()
	if err != nil {
		t.Fatal(err)
	}
	ac, err := jwt.DecodeAccountClaims(tenants)
	uc := mustClaims(t, creds)
	if err != nil || !ac.IsClaimRevoked(uc) {
		t.Errorf("alice is not revoked in the TENANTS JWT signed next (%v)", err)
	}
}
