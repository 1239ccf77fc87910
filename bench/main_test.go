package bench

import (
	"os"
	"testing"
)

// TestMain lets this package's test binary be the scheduler bench's
// renewers too, started again by the bench as cmd/e31 is (MaybeRenewers).
func TestMain(m *testing.M) {
	MaybeRenewers()
	os.Exit(m.Run())
}
