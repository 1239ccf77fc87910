package run

import (
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
)

// TestByImageSaysContainerForAJobWithAnImage: a node that runs jobs naming
// an image in containers, and the others in its sandbox, records each
// attempt's own isolation, and announces the weaker of the two.
func TestByImageSaysContainerForAJobWithAnImage(t *testing.T) {
	t.Parallel()
	plain, err := executor.NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &byImage{plain: plain, containers: plain}
	if got := executor.IsolationOf(b, executor.Spec{JobID: "j", Image: "alpine"}); got != events.IsolationContainer {
		t.Errorf("a job with an image: %q, want container", got)
	}
	if got := executor.IsolationOf(b, executor.Spec{JobID: "j"}); got != events.IsolationNone {
		t.Errorf("a job without an image: %q, want its plain executor's (none)", got)
	}
	if got := executor.Isolation(b); got != events.IsolationNone {
		t.Errorf("the node announces %q, want its plain executor's (none)", got)
	}
}
