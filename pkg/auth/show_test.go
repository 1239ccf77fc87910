package auth_test

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/auth"
)

// TestCredsText: `e31 creds show` names the identity, its expiry and what
// it may publish and subscribe to.
func TestCredsText(t *testing.T) {
	keys, _, err := auth.InitKeys(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	creds, err := keys.Issue(auth.Identity{Role: auth.Submitter, Name: "alice"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := creds.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], "submitter alice (user U") || !strings.HasPrefix(lines[1], "expires ") ||
		!strings.HasPrefix(lines[2], "publish:   ") || !strings.Contains(lines[2], "alice") || !strings.HasPrefix(lines[3], "subscribe: ") {
		t.Errorf("creds show:\n%s", b.String())
	}
}

// TestCredsTextSaysWhatIsDenied: a grant that reaches every submitter's
// bucket through a wildcard refuses e31's own streams by name; `e31 creds
// show` says so, or an operator reading it would think OUTPUT may purge
// the log.
func TestCredsTextSaysWhatIsDenied(t *testing.T) {
	keys, _, err := auth.InitKeys(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	creds, err := keys.Issue(auth.Identity{Role: auth.Service, Service: auth.OutputService, Name: auth.OutputService}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := creds.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	var denied string
	for _, line := range strings.Split(b.String(), "\n") {
		if s, ok := strings.CutPrefix(line, "but not:   "); ok {
			denied = s
		}
	}
	for _, want := range []string{"$JS.API.STREAM.PURGE.E31", "$JS.API.DIRECT.GET.KV_E31_LEDGER"} {
		if !slices.Contains(strings.Fields(denied), want) {
			t.Errorf("creds show does not say %s is denied:\n%s", want, b.String())
		}
	}
}
