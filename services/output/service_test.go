package output_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/query"
	"github.com/e31net/e31/pkg/query/wire"
	"github.com/e31net/e31/pkg/stage"
	"github.com/e31net/e31/services/output"
)

// world is a real server with the OUTPUT service running on it, owning the
// store, as in e31 dev.
type world struct {
	*fixture
	bucket jetstream.ObjectStore
	stop   func()
	svc    *output.Service // the one running
	// keepDeleted is the service's KeepDeleted (zero: its default).
	keepDeleted time.Duration
}

func startWorld(t *testing.T) *world {
	t.Helper()
	return startWorldKeeping(t, 0)
}

// startWorldKeeping is startWorld with OUTPUT remembering a deleted job
// for keepDeleted (zero: its default).
func startWorldKeeping(t *testing.T, keepDeleted time.Duration) *world {
	t.Helper()
	w := newWorld(t, keepDeleted)
	w.run(t)
	return w
}

// newWorld is startWorldKeeping before OUTPUT runs.
func newWorld(t *testing.T, keepDeleted time.Duration) *world {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	bucket, err := js.ObjectStore(ctx, events.DataBucket)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{fixture: &fixture{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/test", nil), store: stage.NewObjectStore(bucket)}, bucket: bucket,
		keepDeleted: keepDeleted}
	return w
}

// run starts the service; stop stops it.
func (w *world) run(t *testing.T) {
	t.Helper()
	svc, err := output.New(w.js, output.Config{Store: w.store, DeleteGrace: time.Second, KeepDeleted: w.keepDeleted, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.svc = svc
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := svc.Run(ctx); err != nil {
			t.Errorf("output service: %v", err)
		}
	})
	var once sync.Once
	w.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(w.stop)
}

// folder uploads files (name → content) as one folder and returns its ref.
func (w *world) folder(t *testing.T, name string, files map[string]string) events.DataRef {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	for p, content := range files {
		writeLocal(t, filepath.Join(dir, p), content)
	}
	ref, err := stage.Upload(w.ctx, w.store, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref.Name = name
	return ref
}

func writeLocal(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runJob logs a job's life: submitted with data, stopped having written
// out (collected as RUN does), returned by the service, released. It returns
// once the job is over.
func (w *world) runJob(t *testing.T, job string, retention time.Duration, data []events.DataRef, out map[string]string) {
	t.Helper()
	spec := events.JobSpec{Data: data, RetentionSeconds: retention.Seconds(), Output: []events.OutputDecl{{Path: "**", Required: true}}}
	w.append(t, job, &events.JobSubmitted{Submitter: "alice", Spec: spec})
	h := events.Hold{Attempt: 1, Node: "n1", CPU: 1, MemoryBytes: 1 << 30}
	w.append(t, job, &events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec})
	w.append(t, job, &events.RunStarted{Hold: h})
	dir := t.TempDir()
	for p, content := range out {
		writeLocal(t, filepath.Join(dir, p), content)
	}
	c, err := stage.Collect(w.ctx, w.store, dir, spec.Output, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.Declared = spec.Output
	w.append(t, job, &events.RunStopped{Hold: h, Outcome: events.Succeeded, ExitCode: new(int), Output: c})
	w.waitEvent(t, job, func(e events.Event) bool { _, ok := e.(*events.OutputReturned); return ok })
	w.append(t, job, &events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true})
}

func (w *world) append(t *testing.T, job string, ev events.Event) {
	t.Helper()
	if _, err := w.pub.Append(w.ctx, job, ev); err != nil {
		t.Fatal(err)
	}
}

// waitEvent follows a job's log until an event matches, with a deadline.
func (w *world) waitEvent(t *testing.T, job string, match func(events.Event) bool) events.Envelope {
	t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 20*time.Second)
	defer cancel()
	cons, err := w.js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.JobSubject(job)}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			evs, _ := bus.ReadJob(w.ctx, w.js, job, 1)
			var names []string
			for _, e := range evs {
				names = append(names, e.String())
			}
			t.Fatalf("job %s: the event waited for never came (%v); its log: %v", job, err, names)
		}
		env, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err == nil && match(env.Event) {
			return env
		}
	}
}

// deleted is every Deleted in a job's log.
func (w *world) deleted(t *testing.T, job string) []events.Deleted {
	t.Helper()
	evs, err := bus.ReadJob(w.ctx, w.js, job, 1)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Deleted
	for _, e := range evs {
		if d, ok := e.Event.(*events.Deleted); ok {
			out = append(out, *d)
		}
	}
	return out
}

func isDeleted(what string) func(events.Event) bool {
	return func(e events.Event) bool { d, ok := e.(*events.Deleted); return ok && d.What == what }
}

// waitGone watches the bucket until none of names is stored, with a
// deadline.
func (w *world) waitGone(t *testing.T, names []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 20*time.Second)
	defer cancel()
	watcher, err := w.bucket.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := watcher.Stop(); err != nil {
			t.Errorf("stop watching the bucket: %v", err)
		}
	}()
	present := map[string]bool{}
	ready := false
	for {
		if ready && !slices.ContainsFunc(names, func(n string) bool { return present[n] }) {
			return
		}
		select {
		case info := <-watcher.Updates():
			if info == nil {
				ready = true
				continue
			}
			present[info.Name] = !info.Deleted
		case <-ctx.Done():
			var left []string
			for _, n := range names {
				if present[n] {
					left = append(left, n)
				}
			}
			t.Fatalf("still stored after 20s: %v", left)
		}
	}
}

func (w *world) stored(t *testing.T, name string) bool {
	t.Helper()
	_, err := w.store.Stat(w.ctx, name)
	if err != nil && !errors.Is(err, stage.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// objectsOf is every object the data is stored in.
func (w *world) objectsOf(t *testing.T, kind, digest string) []string {
	t.Helper()
	names, complete, err := stage.NewExpander(w.store).Objects(w.ctx, kind, digest)
	if err != nil || !complete {
		t.Fatalf("objects of %s: complete %v, %v", digest, complete, err)
	}
	return names
}

// TestRetentionExpiresAndSweepsWhatNoOtherJobHolds runs a job with a short
// retention whose data shares a file with a job that lives on. When the
// retention passes OUTPUT records both deletions, and the sweep removes
// every object of the first job except the shared one.
func TestRetentionExpiresAndSweepsWhatNoOtherJobHolds(t *testing.T) {
	t.Parallel()
	w := startWorld(t)
	shared := "the same bytes in two jobs\n"
	dataA := w.folder(t, "in", map[string]string{"shared.txt": shared, "own.txt": "only job a has these\n"})
	dataB := w.folder(t, "in", map[string]string{"copy.txt": shared})
	w.runJob(t, "job-b", time.Hour, []events.DataRef{dataB}, map[string]string{"b.txt": "b's output\n"})
	start := time.Now()
	w.runJob(t, "job-a", 2*time.Second, []events.DataRef{dataA}, map[string]string{"r.txt": "a's output\n", "bin/x.sh": "#!/bin/sh\n"})

	ret := w.waitEvent(t, "job-a", func(e events.Event) bool { _, ok := e.(*events.OutputReturned); return ok }).Event.(*events.OutputReturned)
	objsA := append(w.objectsOf(t, stage.KindDir, dataA.Digest), w.objectsOf(t, stage.KindDir, ret.Manifest)...)
	sharedBlob := "blob/sha256/" + digestOfString(shared)
	if !slices.Contains(objsA, sharedBlob) {
		t.Fatalf("job a's objects %v do not include the shared blob", objsA)
	}

	w.waitEvent(t, "job-a", isDeleted(events.WhatOutput))
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("deleted %s after the job ended, before its retention of 2s", took)
	}
	got := w.deleted(t, "job-a")
	want := []events.Deleted{
		{What: events.WhatData, Cause: events.CauseExpired, Files: 2, Bytes: dataA.Bytes},
		{What: events.WhatOutput, Cause: events.CauseExpired, Files: 2, Bytes: ret.Bytes},
	}
	if !slices.Equal(got, want) {
		t.Errorf("deleted %+v, want %+v", got, want)
	}

	var doomed []string
	for _, o := range objsA {
		if o != sharedBlob {
			doomed = append(doomed, o)
		}
	}
	w.waitGone(t, doomed)
	if !w.stored(t, sharedBlob) {
		t.Errorf("the blob job b still holds was deleted")
	}
	for _, o := range w.objectsOf(t, stage.KindDir, dataB.Digest) {
		if strings.HasPrefix(o, "blob/") && !w.stored(t, o) {
			t.Errorf("job b's %s was deleted", o)
		}
	}
	if d := w.deleted(t, "job-b"); len(d) != 0 {
		t.Errorf("job b, whose retention has not passed, has deletions %+v", d)
	}
}

// TestDeleteOnRequestAndAfterARestart deletes a job's output on request,
// then asks for its data while OUTPUT is down: the restarted service
// rebuilds its projection from the log and does it.
func TestDeleteOnRequestAndAfterARestart(t *testing.T) {
	t.Parallel()
	w := startWorld(t)
	data := w.folder(t, "in", map[string]string{"a.txt": "input\n"})
	w.runJob(t, "job-c", 24*time.Hour, []events.DataRef{data}, map[string]string{"r.txt": "result\n"})
	ret := w.waitEvent(t, "job-c", func(e events.Event) bool { _, ok := e.(*events.OutputReturned); return ok }).Event.(*events.OutputReturned)

	for range 2 {
		w.append(t, "job-c", &events.DeleteRequested{What: events.WhatOutput, By: "alice"})
	}
	w.waitEvent(t, "job-c", isDeleted(events.WhatOutput))
	w.waitGone(t, w.objectsOf(t, stage.KindDir, ret.Manifest))
	for _, o := range w.objectsOf(t, stage.KindDir, data.Digest) {
		if strings.HasPrefix(o, "blob/") && !w.stored(t, o) {
			t.Errorf("the data's %s was deleted with the output", o)
		}
	}

	w.stop()
	w.append(t, "job-c", &events.DeleteRequested{What: events.WhatData, By: "alice", Reason: "done with it"})
	w.run(t)
	w.waitEvent(t, "job-c", isDeleted(events.WhatData))
	w.waitGone(t, w.objectsOf(t, stage.KindDir, data.Digest))
	want := []events.Deleted{
		{What: events.WhatOutput, Cause: events.CauseRequested, By: "alice", Files: 1, Bytes: 7},
		{What: events.WhatData, Cause: events.CauseRequested, By: "alice", Files: 1, Bytes: 6},
	}
	if got := w.deleted(t, "job-c"); !slices.Equal(got, want) {
		t.Errorf("deleted %+v, want %+v (each once)", got, want)
	}

	// What OUTPUT says it keeps agrees.
	var reply wire.StoredReply
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg, err := query.Ask(ctx, w.js.Conn(), wire.OutputStoredSubject("operator"), []byte(`{"job":"job-c","deleted":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(msg.Data, &reply); err != nil || len(reply.Jobs) != 1 {
		t.Fatalf("stored: %s (%v)", msg.Data, err)
	}
	if st := reply.Jobs[0]; st.Data.DeletedAt == nil || st.Output.DeletedAt == nil || st.Expires == nil {
		t.Errorf("stored %+v, want both deleted", st)
	}
}

// TestReturnsManyFilesThroughTheManifest returns more files than an event
// lists, one of them damaged beyond the listing: the return counts and
// names it, and its manifest has exactly the others.
func TestReturnsManyFilesThroughTheManifest(t *testing.T) {
	t.Parallel()
	f := start(t)
	svc, err := output.New(f.js, output.Config{Store: f.store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const n = 1500
	for i := range n {
		writeLocal(t, filepath.Join(dir, fmt.Sprintf("f%04d", i)), fmt.Sprintf("file %d\n", i))
	}
	decl := []events.OutputDecl{{Path: "**", Required: true}}
	c, err := stage.Collect(f.ctx, f.store, dir, decl, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.Declared = decl
	if c.Count != n || len(c.Files) >= n {
		t.Fatalf("collected %d listed of %d", len(c.Files), c.Count)
	}
	// The last file, which no event lists, goes missing.
	if err := f.store.Delete(f.ctx, "blob/sha256/"+digestOfString(fmt.Sprintf("file %d\n", n-1))); err != nil {
		t.Fatal(err)
	}
	h := events.Hold{Attempt: 1, Node: "n1", CPU: 1}
	if _, err := f.pub.Append(f.ctx, "job-m", &events.ComputeHeld{Hold: h, Submitter: "alice"}); err != nil {
		t.Fatal(err)
	}
	env, err := f.pub.Append(f.ctx, "job-m", &events.RunStopped{Hold: h, Outcome: events.Succeeded, ExitCode: new(int), Output: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Handle(f.ctx, env); err != nil {
		t.Fatal(err)
	}
	r := f.returned(t, "job-m")[0]
	last := fmt.Sprintf("f%04d", n-1)
	if r.Outcome != events.Failed || !strings.Contains(r.Reason, last) || !slices.Contains(r.Missing, last) {
		t.Errorf("outcome %s (%q), missing %v; want failed naming %s", r.Outcome, r.Reason, r.Missing, last)
	}
	if r.FileCount() != n-1 || r.Count != n-1 || r.Manifest == "" || r.Manifest == c.Manifest {
		t.Errorf("returned count %d, manifest %s; want %d files in a new manifest", r.FileCount(), r.Manifest, n-1)
	}
	files, err := stage.ManifestFiles(f.ctx, f.store, r.Manifest)
	if err != nil || len(files) != n-1 || slices.ContainsFunc(files, func(f events.OutputFile) bool { return f.Path == last }) {
		t.Errorf("the returned manifest has %d files (%v), want %d without %s", len(files), err, n-1, last)
	}
}

func digestOfString(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// writeLog stores the log of a job's first attempt as RUN does: past its
// cap, so in head and tail chunks, with an index; it returns the names of
// its objects.
func (w *world) writeLog(t *testing.T, job string) []string {
	t.Helper()
	l := stage.NewJobLog(w.store, job, 1, 1<<20)
	mustWrite(t, l.Stdout(), []byte(strings.Repeat("a line the job printed\n", (2<<20)/23)))
	mustWrite(t, l.Stderr(), []byte("the last words\n"))
	if err := l.Flush(w.ctx, true); err != nil {
		t.Fatal(err)
	}
	names := w.logObjects(t, job)
	if len(names) < 4 {
		t.Fatalf("job %s's log is stored in %v: want an index, head and tail chunks", job, names)
	}
	return names
}

// logObjects is every object stored of a job's logs.
func (w *world) logObjects(t *testing.T, job string) []string {
	t.Helper()
	infos, err := w.bucket.List(w.ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Fatal(err)
	}
	var names []string
	for _, info := range infos {
		if strings.HasPrefix(info.Name, "log/"+job+"/") && !info.Deleted {
			names = append(names, info.Name)
		}
	}
	return names
}

// TestRetentionDeletesTheLogsWithTheOutput: the logs of a job's attempts
// (what `e31 logs` reads) are part of its output. They leave the store when
// its retention passes, also for a job that returned no file and only
// printed, and when its submitter deletes its output; another job's logs
// stay.
func TestRetentionDeletesTheLogsWithTheOutput(t *testing.T) {
	t.Parallel()
	w := startWorld(t)
	kept := w.writeLog(t, "job-k")
	w.runJob(t, "job-k", time.Hour, nil, map[string]string{"k.txt": "kept\n"})
	doomed := map[string][]string{}
	doomed["job-l"] = w.writeLog(t, "job-l")
	w.runJob(t, "job-l", 2*time.Second, nil, map[string]string{"l.txt": "l's output\n"})
	doomed["job-q"] = w.writeLog(t, "job-q")
	w.runJob(t, "job-q", 2*time.Second, nil, nil)
	doomed["job-r"] = w.writeLog(t, "job-r")
	w.runJob(t, "job-r", 24*time.Hour, nil, map[string]string{"r.txt": "r's output\n"})
	w.append(t, "job-r", &events.DeleteRequested{What: events.WhatOutput, By: "alice"})

	for job, names := range doomed {
		w.waitEvent(t, job, isDeleted(events.WhatOutput))
		w.waitGone(t, names)
		if left := w.logObjects(t, job); len(left) != 0 {
			t.Errorf("job %s: log objects left after its output was deleted: %v", job, left)
		}
	}
	want := []events.Deleted{{What: events.WhatOutput, Cause: events.CauseExpired}}
	if got := w.deleted(t, "job-q"); !slices.Equal(got, want) {
		t.Errorf("job-q, which only printed: deleted %+v, want %+v", got, want)
	}
	for _, n := range kept {
		if !w.stored(t, n) {
			t.Errorf("job-k's %s was deleted; its retention has not passed", n)
		}
	}
	if d := w.deleted(t, "job-k"); len(d) != 0 {
		t.Errorf("job-k, whose retention has not passed, has deletions %+v", d)
	}
}

// TestAStartSetsTheTimersOfEveryJobInTheLog: the jobs whose retention passed
// while OUTPUT was down, more than it sets at once, all have their output
// deleted once it is back, each once.
func TestAStartSetsTheTimersOfEveryJobInTheLog(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 0)
	const n = 300
	spec := events.JobSpec{RetentionSeconds: 1}
	for i := range n {
		job := fmt.Sprintf("job-%03d", i)
		h := events.Hold{Attempt: 1, Node: "n1", CPU: 1}
		for _, ev := range []events.Event{
			&events.JobSubmitted{Submitter: "alice", Spec: spec},
			&events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec},
			&events.RunStarted{Hold: h},
			&events.RunStopped{Hold: h, Outcome: events.Failed, Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}},
				Logs: &events.Logs{StderrBytes: 12}},
			&events.OutputReturned{Hold: h, Outcome: events.Failed, Files: []events.OutputFile{}, Missing: []string{}},
			&events.ComputeReleased{Hold: h, Outcome: events.Failed, Final: true},
		} {
			w.append(t, job, ev)
		}
	}
	ctx, cancel := context.WithTimeout(w.ctx, 40*time.Second)
	defer cancel()
	cons, err := w.js.OrderedConsumer(ctx, events.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.KindSubject(events.TypeDeleted)}})
	if err != nil {
		t.Fatal(err)
	}
	w.run(t)
	deleted := map[string]int{}
	for len(deleted) < n {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("%d of %d jobs had their output deleted: %v", len(deleted), n, err)
		}
		env, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := env.Event.(*events.Deleted); ok && d.What == events.WhatOutput && d.Cause == events.CauseExpired {
			deleted[env.Subject]++
		}
	}
	for job, times := range deleted {
		if times != 1 {
			t.Errorf("%s: output deleted %d times, want once", job, times)
		}
	}
}

// mustWrite writes b to a job's log as the job would, failing the test if
// the log refuses it.
func mustWrite(t testing.TB, w io.Writer, b []byte) {
	t.Helper()
	if _, err := w.Write(b); err != nil {
		t.Fatalf("write to the job's log: %v", err)
	}
}
