package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/run/executor"
)

// A job that declares a checkpoint (events.CheckpointSpec) has the folder
// saved by its node every EverySeconds while it runs and once more when it
// stops on a node that survives (its limit, a cancel, out of memory, the
// node told to stop), each save recorded as CheckpointSaved; and an attempt
// after the first finds the last save of an earlier attempt restored at the
// same path under /out before it starts, with $E31_RESUMED_FROM naming it.
//
// A save is consistent where the executor can snapshot the job
// (executor.Snapshotter: the sandbox on a btrfs job disk freezes the job's
// cgroup around a read-only snapshot, milliseconds, and the upload reads
// the snapshot for as long as it takes). Elsewhere (a tmpfs /out) the
// folder is uploaded live: a file that changes while it is sent fails the
// upload (stage.ErrChanged) and the save hashes the folder again, a few
// times; a job that writes its state with write-then-rename has each file
// whole either way. The store is content addressed: a file, or a 16 MiB
// part of one, already stored is not sent again, and a file unchanged
// since the last save is not even hashed again (stage.HashCache), so an
// unchanged file costs a save a stat and a look-up in the store.
//
// A save the store refuses for the submitter's quota (stage.ErrFull), or
// that fails for any other reason, is logged and noted in the stop's
// reason; it never ends the job.

// saveTries is how many times a live save hashes the folder again when a
// file changed while it was sent.
const saveTries = 3

// resumeOf is the save an attempt of a job that declares a checkpoint
// resumes from: the last save of an earlier attempt that counts, or nil
// for a fresh start (the first attempt, or no save).
func (s *Service) resumeOf(ctx context.Context, job string, held *events.ComputeHeld) (*events.CheckpointSaved, error) {
	if held.Spec.Checkpoint == nil || held.Attempt < 2 {
		return nil, nil
	}
	history, err := bus.ReadJob(ctx, s.js, job, 1)
	if err != nil {
		return nil, fmt.Errorf("read %s for its checkpoint: %w", job, err)
	}
	var saves events.Saves
	var last *events.CheckpointSaved
	for _, e := range history {
		if saves.Accept(e.Event) {
			if c := e.Event.(*events.CheckpointSaved); c.Attempt < held.Attempt {
				last = c
			}
		}
	}
	return last, nil
}

// restore writes the save into the job's /out at its path, owned as /out
// is (by the job's user), before the job starts. It is written on the
// job's disk, so it counts against request.disk like anything the job
// writes.
func restore(ctx context.Context, store stage.Store, save *events.CheckpointSaved, spec *events.CheckpointSpec, outDir string) error {
	dest := filepath.Join(outDir, filepath.FromSlash(spec.Path))
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	if err := stage.FetchDir(ctx, store, save.Manifest, dest, nil); err != nil {
		return err
	}
	fi, err := os.Stat(outDir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	// Everything from /out down to the folder: the parents MkdirAll made
	// too.
	return filepath.WalkDir(outDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != outDir && !within(p, dest) && !within(dest, p) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		return os.Lchown(p, int(st.Uid), int(st.Gid))
	})
}

// within reports whether p is dir or under it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && (rel == "." || len(rel) < 3 || rel[:3] != "../")
}

// saver saves one attempt's checkpoint. Its methods are called from the
// goroutine that saves periodically and, once that has stopped, from the
// one that saves at the stop: never at once.
type saver struct {
	s     *Service
	job   string
	hold  events.Hold
	spec  events.CheckpointSpec
	store stage.Store
	xjob  executor.Job
	log   *slog.Logger

	mu sync.Mutex
	// last is the event the next save reacts to: the attempt's start, then
	// its last save. A save appends only while it is the job's last word
	// about the attempt, so nothing that ended the attempt came between.
	last events.Envelope
	// n is the number of saves recorded; manifest the last one's.
	n        int
	manifest string
	// over says the attempt was found ended: no more saves.
	over bool
	// failed is why the last save failed, for the stop's reason.
	failed string
	// paused adds up how long the job was frozen for snapshots.
	paused time.Duration
	// hashes remembers the digests of the files saved, so that a save
	// hashes only what changed since the last one.
	hashes *stage.HashCache
}

// newSaver is the saver of an attempt that resumed from resume (nil for a
// fresh start): the folder as restored is that save, and is not saved
// again until it changes.
func (s *Service) newSaver(job string, held *events.ComputeHeld, started events.Envelope, resume *events.CheckpointSaved, store stage.Store, xjob executor.Job, log *slog.Logger) *saver {
	if held.Spec.Checkpoint == nil {
		return nil
	}
	sv := &saver{s: s, job: job, hold: held.Hold, spec: *held.Spec.Checkpoint, store: store, xjob: xjob, last: started, log: log,
		hashes: stage.NewHashCache()}
	if resume != nil {
		sv.manifest = resume.Manifest
	}
	return sv
}

// every saves every spec.EverySeconds until ctx ends.
func (sv *saver) every(ctx context.Context) {
	if sv == nil {
		return
	}
	tick := time.NewTicker(time.Duration(sv.spec.EverySeconds * float64(time.Second)))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if sv.save(ctx, events.TriggerEvery) {
			return
		}
	}
}

// save saves the folder once and records it, unless it is as the last
// save left it. It reports whether the attempt was found over (nothing more
// is saved). A failure is logged and kept for the stop's reason.
func (sv *saver) save(ctx context.Context, trigger string) (over bool) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.over {
		return true
	}
	ev, err := sv.upload(ctx, trigger)
	switch {
	case errors.Is(err, errNothingToSave):
		return false
	case err != nil:
		if ctx.Err() == nil {
			sv.failed = err.Error()
			sv.log.Warn("checkpoint not saved", "trigger", trigger, "err", err)
		}
		return false
	case ev == nil:
		return false // unchanged since the last save
	}
	stored, err := sv.s.pub.React(ctx, sv.last, func(after []events.Envelope) ([]events.Event, error) {
		return DecideSave(*ev, after), nil
	})
	if err != nil {
		sv.failed = fmt.Sprintf("recording checkpoint save %s: %v", ev.SaveName(), err)
		sv.log.Warn("checkpoint saved but not recorded", "save", ev.SaveName(), "err", err)
		return false
	}
	if len(stored) == 0 {
		sv.over = true
		sv.log.Info("checkpoint save set aside: the attempt is over", "save", ev.SaveName())
		return true
	}
	sv.last, sv.n, sv.manifest, sv.failed = stored[0], ev.N, ev.Manifest, ""
	sv.log.Info("checkpoint saved", "save", ev.SaveName(), "trigger", trigger, "files", ev.Files,
		"bytes", ev.Bytes, "new_bytes", ev.NewBytes, "seq", stored[0].Seq)
	return false
}

// errNothingToSave: the job has not made the folder (yet).
var errNothingToSave = errors.New("run: no checkpoint folder")

// upload stores the folder, from a snapshot where the executor takes one,
// and returns the save to record, or nil if it is the last one's.
func (sv *saver) upload(ctx context.Context, trigger string) (*events.CheckpointSaved, error) {
	out, remove, err := sv.source()
	if err != nil {
		return nil, err
	}
	if remove != nil {
		defer func() {
			if err := remove(); err != nil {
				sv.log.Warn("removing a checkpoint snapshot", "err", err)
			}
		}()
	}
	dir := filepath.Join(out, filepath.FromSlash(sv.spec.Path))
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, errNothingToSave
	}
	counted := &countingStore{Store: sv.store}
	var ref events.DataRef
	for try := 1; ; try++ {
		ref, err = stage.UploadCached(ctx, counted, dir, nil, sv.hashes)
		// Live, a file may change while it is sent: hash again.
		if !errors.Is(err, stage.ErrChanged) || remove != nil || try == saveTries {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("upload checkpoint %s: %w", sv.spec.Path, err)
	}
	if ref.Digest == sv.manifest && trigger == events.TriggerEvery {
		return nil, nil
	}
	return &events.CheckpointSaved{Hold: sv.hold, N: sv.n + 1, Path: sv.spec.Path, Manifest: ref.Digest,
		Files: ref.Files, Bytes: ref.Bytes, NewBytes: counted.sent.Load(), Trigger: trigger}, nil
}

// source is the /out to upload from: a snapshot's, with the func that
// removes it, or the live one's (remove nil).
func (sv *saver) source() (string, func() error, error) {
	live := sv.xjob.Dirs().OutDir
	snap, ok := sv.xjob.(executor.Snapshotter)
	if !ok {
		return live, nil, nil
	}
	out, paused, remove, err := snap.Snapshot()
	if errors.Is(err, executor.ErrNoSnapshot) {
		return live, nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	sv.paused += paused
	return out, remove, nil
}

// stopped saves once more after the job stopped, unless the node is
// giving the attempt up (fenced), and returns what the stop's reason should
// add (a save that failed), or "".
func (sv *saver) stopped(ctx context.Context, trigger string) string {
	if sv == nil {
		return ""
	}
	sv.save(ctx, trigger)
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.failed == "" {
		return ""
	}
	return "checkpoint not saved: " + sv.failed
}

// DecideSave is what RUN appends for a save, given what happened to the
// job since the event it reacts to (the attempt's start, or its last save):
// the save, unless the attempt is over (its stop, HoldLost, HoldExpired,
// ComputeReleased) or this save is stored already. A save that comes after
// the attempt ended would be set aside by every reader (events.Saves): it
// is not appended at all.
func DecideSave(save events.CheckpointSaved, after []events.Envelope) []events.Event {
	for _, e := range after {
		h, ok := events.HoldOf(e.Event)
		if !ok || h.Attempt != save.Attempt || !events.FromHolder(e.Event, save.Node) {
			continue
		}
		switch ev := e.Event.(type) {
		case *events.RunStopped, *events.HoldLost, *events.HoldExpired, *events.ComputeReleased:
			return nil
		case *events.CheckpointSaved:
			if ev.N >= save.N {
				return nil
			}
		}
	}
	return []events.Event{&save}
}

// countingStore counts the bytes a save sends: what the store did not
// hold already.
type countingStore struct {
	stage.Store
	sent atomic.Int64
}

func (c *countingStore) Put(ctx context.Context, name, digest string, size int64, r io.Reader) error {
	err := c.Store.Put(ctx, name, digest, size, r)
	if err == nil {
		c.sent.Add(size)
	}
	return err
}
