package connect

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDevCredsAreFoundForTheNotedServerOnly(t *testing.T) {
	config, state := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(state, "creds"), 0o700); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(state, "creds", "carol.creds")
	if err := os.WriteFile(creds, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := NoteDev(config, "127.0.0.1:4222", state); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url, user, want string
	}{
		{"", "carol", creds},
		{"nats://127.0.0.1:4222", "carol", creds},
		{"nats://localhost:4222", "carol", creds},
		{"nats://localhost", "carol", creds},
		{"nats://127.0.0.1:4223", "carol", ""},
		{"nats://10.0.0.1:4222", "carol", ""},
		{"nats://127.0.0.1:4222,nats://127.0.0.1:4223", "carol", ""},
		{"nats://127.0.0.1:4222", "dave", ""},
	} {
		got, err := DevCreds(config, tc.url, tc.user)
		if err != nil || got != tc.want {
			t.Errorf("DevCreds(%q, %q) = %q, %v; want %q", tc.url, tc.user, got, err, tc.want)
		}
	}
}
