package auth_test

import (
	"bytes"
	"path/filepath"
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
