package run_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/run"
)

// saves are the job's CheckpointSaved in log order, and the sequence of
// the first event that ended attempt 1 (0 if none did).
func (n *node) saves(t *testing.T, id string) (saves []*events.CheckpointSaved, seqs []uint64, ended uint64) {
	t.Helper()
	evs, err := bus.ReadJob(n.ctx, n.js, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		switch ev := e.Event.(type) {
		case *events.CheckpointSaved:
			saves, seqs = append(saves, ev), append(seqs, e.Seq)
		case *events.HoldLost, *events.RunStopped:
			if ended == 0 {
				ended = e.Seq
			}
		}
	}
	return saves, seqs, ended
}

// checkpointed is a job that declares ckpt saved every second.
func checkpointed(script string) events.JobSpec {
	spec := job(script, nil)
	spec.Request.DiskBytes = 256 << 20
	spec.Checkpoint = &events.CheckpointSpec{Path: "ckpt", EverySeconds: 1}
	return spec
}

// TestCheckpointSendsOnlyWhatChanged runs a job that writes a 32 MiB file
// into its checkpoint once and a small step file every half second for 6 s
// (each written beside the folder and renamed into it, so that a save
// never holds a file half written, nor a temporary one): the
// first save sends the large file, every later one only what changed, and
// the last is the save at the stop.
func TestCheckpointSendsOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	spec := checkpointed(`set -e
mkdir -p "$E31_OUTPUT/ckpt"
head -c 33554432 /dev/urandom > "$E31_OUTPUT/big.tmp" && mv "$E31_OUTPUT/big.tmp" "$E31_OUTPUT/ckpt/big"
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
  echo $i > "$E31_OUTPUT/step.tmp" && mv "$E31_OUTPUT/step.tmp" "$E31_OUTPUT/ckpt/step"
  sleep 0.5
done`)
	held := n.hold(t, "cp-1", spec)
	n.handleHeld(t, held)

	saves, _, _ := n.saves(t, "cp-1")
	// At least the first save and the one at the stop; more while it ran,
	// as many as the machine's speed allows.
	if len(saves) < 2 {
		t.Fatalf("%d saves of a 6 s job saved every second, want at least 2", len(saves))
	}
	if first := saves[0]; first.NewBytes < 32<<20 || first.N != 1 || first.Trigger != events.TriggerEvery {
		t.Errorf("first save %+v: want n 1, trigger every, the 32 MiB file sent", first)
	}
	for _, s := range saves[1:] {
		if s.NewBytes >= 1<<20 {
			t.Errorf("save %s sent %d bytes: the unchanged 32 MiB file was sent again", s.SaveName(), s.NewBytes)
		}
		if s.Bytes < 32<<20 || s.Files != 2 {
			t.Errorf("save %s holds %d files of %d bytes, want 2 of over 32 MiB", s.SaveName(), s.Files, s.Bytes)
		}
	}
	last := saves[len(saves)-1]
	if last.Trigger != events.TriggerStop {
		t.Errorf("the last save's trigger is %q, want stop", last.Trigger)
	}
	// What the last save holds is what the job left.
	dest := filepath.Join(n.dir, "restored")
	if err := stage.FetchDir(n.ctx, n.store, last.Manifest, dest, nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "step")); string(b) != "12\n" {
		t.Errorf("the last save's step file holds %q, want 12", b)
	}
	if _, stopped := n.log(t, "cp-1"); stopped == nil || stopped.Outcome != events.Succeeded {
		t.Fatalf("stop %+v, want succeeded", stopped)
	}
}

// TestResumeRestoresTheLastSave runs attempt 1 of a job that counts into
// its checkpoint and fails half-way, then attempt 2 of it: attempt 2
// starts with attempt 1's last save under /out, $E31_RESUMED_FROM names
// it, RunStarted records it, and it counts on from there.
func TestResumeRestoresTheLastSave(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	script := `set -e
mkdir -p "$E31_OUTPUT/ckpt"
i=$(cat "$E31_OUTPUT/ckpt/i" 2>/dev/null || echo 0)
echo "attempt $E31_ATTEMPT resumed from [$E31_RESUMED_FROM] at $i" >> "$E31_OUTPUT/ckpt/log"
while [ $i -lt 6 ]; do
  i=$((i+1))
  echo $i > "$E31_OUTPUT/ckpt/i.tmp" && mv "$E31_OUTPUT/ckpt/i.tmp" "$E31_OUTPUT/ckpt/i"
  if [ "$E31_ATTEMPT" = 1 ] && [ $i = 3 ]; then exit 1; fi
done
cp "$E31_OUTPUT/ckpt/log" "$E31_OUTPUT/result"`
	spec := checkpointed(script)
	spec.Output = []events.OutputDecl{{Path: "result", Required: true}}
	n.handleHeld(t, n.hold(t, "cp-2", spec))
	saves, _, _ := n.saves(t, "cp-2")
	if len(saves) == 0 {
		t.Fatal("attempt 1 saved nothing")
	}
	from := saves[len(saves)-1].SaveName()

	// RELEASE gives attempt 1 back, RENT holds the job again.
	h1 := saves[0].Hold
	n.append(t, "cp-2", &events.ComputeReleased{Hold: h1, Outcome: events.Failed})
	h2 := h1
	h2.Attempt = 2
	n.handleHeld(t, n.append(t, "cp-2", &events.ComputeHeld{Hold: h2, Submitter: "alice", Spec: spec}))

	evs, err := bus.ReadJob(n.ctx, n.js, "cp-2", 1)
	if err != nil {
		t.Fatal(err)
	}
	var resumed string
	var returned *events.RunStopped
	for _, e := range evs {
		switch ev := e.Event.(type) {
		case *events.RunStarted:
			if ev.Attempt == 2 {
				resumed = ev.ResumedFrom
			}
		case *events.RunStopped:
			if ev.Attempt == 2 {
				returned = ev
			}
		}
	}
	if resumed != from {
		t.Errorf("attempt 2's RunStarted resumed from %q, want %q", resumed, from)
	}
	if returned == nil || returned.Outcome != events.Succeeded || len(returned.Output.Files) != 1 {
		t.Fatalf("attempt 2 stopped %+v", returned)
	}
	dest := filepath.Join(n.dir, "result")
	if err := stage.Fetch(n.ctx, n.store, returned.Output.Files, dest, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dest, "result"))
	want := "attempt 1 resumed from [] at 0\nattempt 2 resumed from [" + from + "] at 3\n"
	if !bytes.Equal(got, []byte(want)) {
		t.Errorf("the job's log:\n%s\nwant:\n%s", got, want)
	}
}

// TestNoSaveAfterTheAttemptIsLost gives a running attempt up as lost (as
// RENT does when the node's lease lapses) while its node, cut off, goes on
// saving: no save of it is stored after the loss.
func TestNoSaveAfterTheAttemptIsLost(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	spec := checkpointed(`mkdir -p "$E31_OUTPUT/ckpt"
for i in 1 2 3 4 5 6 7 8 9 10; do echo $i > "$E31_OUTPUT/ckpt/i"; sleep 0.4; done`)
	// Once it has saved, its attempt is declared lost.
	saved := make(chan *nats.Msg, 64)
	sub, err := n.js.Conn().ChanSubscribe("e31.job.cp-3.saved.>", saved)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	held := n.hold(t, "cp-3", spec)
	done := n.handleHeldAsync(held)
	select {
	case <-saved:
	case <-n.ctx.Done():
		t.Fatal("no save while the job ran")
	}
	h := held.Event.(*events.ComputeHeld).Hold
	n.append(t, "cp-3", &events.HoldLost{Hold: h, Reason: "the node's lease lapsed"})
	n.returned(t, done, "after the job ended")

	saves, seqs, ended := n.saves(t, "cp-3")
	if ended == 0 {
		t.Fatal("no HoldLost in the log")
	}
	for i, s := range saves {
		if seqs[i] > ended {
			t.Errorf("save %s stored at %d, after the attempt was lost at %d", s.SaveName(), seqs[i], ended)
		}
	}
	// And one that came anyway (a node that publishes without expecting
	// the job's last sequence) is set aside by every reader.
	late := *saves[0]
	late.N = 99
	n.append(t, "cp-3", &late)
	if last, ok := events.LastCheckpoint(mustRead(t, n, "cp-3")); !ok || last.N == 99 {
		t.Errorf("LastCheckpoint = %+v: the late save counts", last)
	}
	if got := run.DecideSave(late, mustRead(t, n, "cp-3")); got != nil {
		t.Errorf("DecideSave after the loss = %v, want nothing", got)
	}
}

func mustRead(t *testing.T, n *node, id string) []events.Envelope {
	t.Helper()
	evs, err := bus.ReadJob(n.ctx, n.js, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// fullStore refuses every object, as a submitter's store at its
// --max-data does.
type fullStore struct{ stage.Store }

func (fullStore) Put(context.Context, string, string, int64, io.Reader) error { return stage.ErrFull }

// TestASaveRefusedForQuotaDoesNotFailTheJob: the store refuses the saves;
// the job runs to its end and succeeds, no save is recorded, and the stop
// says why.
func TestASaveRefusedForQuotaDoesNotFailTheJob(t *testing.T) {
	t.Parallel()
	n := startNode(t, func(s stage.Store) stage.Store { return fullStore{s} })
	spec := checkpointed(`mkdir -p "$E31_OUTPUT/ckpt"; for i in 1 2 3; do echo $i > "$E31_OUTPUT/ckpt/i"; sleep 0.5; done`)
	n.handleHeld(t, n.hold(t, "cp-4", spec))
	saves, _, _ := n.saves(t, "cp-4")
	_, stopped := n.log(t, "cp-4")
	if len(saves) != 0 || stopped == nil || stopped.Outcome != events.Succeeded {
		t.Fatalf("%d saves, stop %+v: want none saved and the job succeeded", len(saves), stopped)
	}
	if !strings.Contains(stopped.Reason, "checkpoint not saved") || !strings.Contains(stopped.Reason, "full") {
		t.Errorf("stop reason %q: want it to say the checkpoint was not saved, the store being full", stopped.Reason)
	}
}
