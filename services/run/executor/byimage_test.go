package executor

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// TestByImageSaysContainerForAJobWithAnImage: a node that runs jobs naming
// an image in containers, and the others in its sandbox, records each
// attempt's own isolation, and announces the weaker of the two.
func TestByImageSaysContainerForAJobWithAnImage(t *testing.T) {
	t.Parallel()
	plain, err := NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := NewByImage(plain, plain)
	if got := IsolationOf(b, Spec{JobID: "j", Image: "alpine"}); got != events.IsolationContainer {
		t.Errorf("a job with an image: %q, want container", got)
	}
	if got := IsolationOf(b, Spec{JobID: "j"}); got != events.IsolationNone {
		t.Errorf("a job without an image: %q, want its plain executor's (none)", got)
	}
	if got := Isolation(b); got != events.IsolationNone {
		t.Errorf("the node announces %q, want its plain executor's (none)", got)
	}
}
