package output_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
)

// TestRunLeavesNothingRunning: OUTPUT returns a job's output, its
// projection follows the log, and once its context ends Run returns (the
// world's stop waits for it, and fails the test on an error) with nothing
// it started still running: checked once the test's server and
// connections are gone (registered first, so it runs last).
func TestRunLeavesNothingRunning(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction(natstest.LeftBySourcing)) })
	w := startWorld(t)
	w.runJob(t, "job-l", time.Hour, nil, map[string]string{"r.txt": "result\n"})
	w.waitEvent(t, "job-l", func(e events.Event) bool { _, ok := e.(*events.OutputReturned); return ok })
	w.stop()
}
