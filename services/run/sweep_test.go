package run_test

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// inSweep puts spec in sweep s at index i.
func inSweep(spec events.JobSpec, s string, i int) events.JobSpec {
	spec.Sweep = &events.SweepPoint{ID: s, Index: i, Count: 2}
	return spec
}

// A member whose hold reaches the node after its sweep's cancel stops
// without starting: the cancel is on the sweep's id, not in the member's
// history, and the node reads it there.
func TestHandleHeldOfAMemberOfACancelledSweepStopsWithoutStarting(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	marker := filepath.Join(n.dir, "runs")
	held := n.hold(t, "s-0", inSweep(job(`echo ran >> "$MARKER"`, map[string]string{"MARKER": marker}), "s", 0))
	// Bob's cancel of alice's sweep is logged too, and changes nothing.
	n.append(t, "s", &events.CancelRequested{By: "bob", Sweep: true})
	n.append(t, "s", &events.CancelRequested{By: "alice", Sweep: true})

	n.handleHeld(t, held)

	names, stopped := n.log(t, "s-0")
	if want := []string{"JobSubmitted", "ComputeHeld", "RunStopped"}; !slices.Equal(names, want) {
		t.Fatalf("s-0's log = %v, want %v", names, want)
	}
	if stopped.Outcome != events.Cancelled {
		t.Errorf("RunStopped = %s (%s), want cancelled", stopped.Outcome, stopped.Reason)
	}
	if got := runs(t, marker); got != 0 {
		t.Errorf("the member ran %d times, want never", got)
	}
}

// A sweep's cancel stops the members running on the node; another
// tenant's cancel of the same sweep, or a cancel of another sweep, does
// not.
func TestHandleCancelOfASweepStopsItsRunningMembers(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	ready, proceed := fifo(t, filepath.Join(n.dir, "ready")), filepath.Join(n.dir, "proceed")
	if err := syscall.Mkfifo(proceed, 0o600); err != nil {
		t.Fatal(err)
	}
	held := n.hold(t, "s-1", inSweep(job(`echo > "$READY"; read x < "$PROCEED"`,
		map[string]string{"READY": ready.path, "PROCEED": proceed}), "s", 1))
	done := n.handleHeldAsync(held)
	ready.wait(t, n.ctx)
	for _, c := range []struct {
		id string
		by string
	}{{"s", "bob"}, {"t", "alice"}} {
		if err := n.run.HandleCancel(n.ctx, n.append(t, c.id, &events.CancelRequested{By: c.by, Sweep: true})); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(proceed, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.returned(t, done, "once told to proceed")
	if _, stopped := n.log(t, "s-1"); stopped == nil || stopped.Outcome != events.Succeeded {
		t.Fatalf("RunStopped after bob's cancel and another sweep's = %+v, want succeeded", stopped)
	}

	ready = fifo(t, filepath.Join(n.dir, "ready-2"))
	held = n.hold(t, "s-2", inSweep(job(`echo > "$READY"; exec sleep 30`, map[string]string{"READY": ready.path}), "s", 2))
	done = n.handleHeldAsync(held)
	ready.wait(t, n.ctx)
	if err := n.run.HandleCancel(n.ctx, n.append(t, "s", &events.CancelRequested{By: "alice", Sweep: true})); err != nil {
		t.Fatal(err)
	}
	n.returned(t, done, "after the sweep's cancel")
	if _, stopped := n.log(t, "s-2"); stopped == nil || stopped.Outcome != events.Cancelled {
		t.Fatalf("RunStopped = %+v, want cancelled", stopped)
	}
}

// A member submitted again in a later round than its sweep's cancel names
// runs: the cancel was for the rounds before it.
func TestHandleHeldOfAMemberSubmittedAfterTheSweepsCancelRuns(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	n.append(t, "s", &events.CancelRequested{By: "alice", Sweep: true})
	spec := inSweep(job(`true`, nil), "s", 0)
	spec.Sweep.Again, spec.Sweep.AgainOf = 1, "s-0"
	held := n.hold(t, "s-0-a1", spec)

	n.handleHeld(t, held)

	if _, stopped := n.log(t, "s-0-a1"); stopped == nil || stopped.Outcome != events.Succeeded {
		t.Fatalf("RunStopped = %+v, want succeeded", stopped)
	}
}
