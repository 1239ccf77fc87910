package bench

import (
	"os"
	"testing"
)

// TestMain lets this package's test binary be the scheduler bench's
// renewers and the history bench's server too, started again by the
// benches as cmd/e31 is (MaybeChild).
func TestMain(m *testing.M) {
	MaybeChild()
	os.Exit(m.Run())
}
