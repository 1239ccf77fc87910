package client_test

import (
	"testing"

	"github.com/e31net/e31/pkg/client"
)

// TestOSUserIsOneSubjectToken: the OS user ends subjects, so whatever it
// holds beyond letters, digits, '-' and '_' must not split or widen them.
func TestOSUserIsOneSubjectToken(t *testing.T) {
	for user, want := range map[string]string{"alice": "alice", "al ice.x>*": "al_ice_x__", "b-o_b9": "b-o_b9"} {
		t.Setenv("USER", user)
		if got := client.OSUser(); got != want {
			t.Errorf("USER=%q: OSUser() = %q, want %q", user, got, want)
		}
	}
}
