package auth_test

import (
	"testing"

	"github.com/e31net/e31/pkg/auth"
)

// TestMayServe: `e31 serve NAME --creds FILE` refuses at start credentials
// the server would refuse one publish at a time.
func TestMayServe(t *testing.T) {
	op := auth.Identity{Role: auth.Operator, Name: "operator"}
	node := auth.Identity{Role: auth.Service, Service: auth.RunService, Name: "node-1"}
	rent := auth.Identity{Role: auth.Service, Service: "rent", Name: "rent-1"}
	alice := auth.Identity{Role: auth.Submitter, Name: "alice"}
	for _, c := range []struct {
		id            auth.Identity
		service, node string
		ok            bool
	}{
		{op, "web", "", true},
		{op, auth.RunService, "node-9", true},
		{node, auth.RunService, "node-1", true},
		{rent, "rent", "", true},
		{node, auth.RunService, "node-2", false},
		{rent, "web", "", false},
		{rent, "submit", "", false},
		{alice, "submit", "", false},
	} {
		if err := c.id.MayServe(c.service, c.node); (err == nil) != c.ok {
			t.Errorf("%s.MayServe(%s, %q) = %v, want ok %v", c.id, c.service, c.node, err, c.ok)
		}
	}
}
