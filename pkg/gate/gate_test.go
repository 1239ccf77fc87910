package gate_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/gate"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
)

// world is a server, the gate on it, and alice's store as a service sees
// it.
type world struct {
	ctx   context.Context
	js    jetstream.JetStream
	pub   *bus.Publisher
	alice stage.Store
	n1    *gate.Client
	n2    *gate.Client
}

func start(t *testing.T) *world {
	t.Helper()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	ctx := natstest.Context(t, time.Minute)
	stores := stage.NewTenants(js, true)
	alice, err := stores.For(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	g := gate.New(js, gate.Config{Stores: stores, Workers: 8, Idle: 2 * time.Second})
	go func() { done <- g.Run(gctx) }()
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatalf("the gate: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the gate: %v", err)
		}
	})
	nc := js.Conn()
	return &world{ctx: ctx, js: js, pub: bus.NewPublisher(js, "e31/test", nil), alice: alice,
		n1: gate.NewClient(nc, "n1"), n2: gate.NewClient(nc, "n2")}
}

func (w *world) append(t *testing.T, job string, ev events.Event) {
	t.Helper()
	if _, err := w.pub.Append(w.ctx, job, ev); err != nil {
		t.Fatal(err)
	}
}

// stage uploads content into alice's store as the CLI does, and returns
// the data reference a job's spec carries.
func (w *world) stage(t *testing.T, name, content string) events.DataRef {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	ref, err := stage.Upload(w.ctx, w.alice, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref.Name = name
	return ref
}

// hold logs a job of alice's with data, held on node as attempt 1.
func (w *world) hold(t *testing.T, job, node string, data ...events.DataRef) events.Hold {
	t.Helper()
	h := events.Hold{Attempt: 1, Node: node, CPU: 1, DiskBytes: 1 << 30}
	spec := events.JobSpec{Data: data, Request: events.Request{CPU: 1, DiskBytes: 1 << 30, LimitSeconds: 60}}
	w.append(t, job, &events.JobSubmitted{Submitter: "alice", Spec: spec})
	w.append(t, job, &events.ComputeHeld{Hold: h, Submitter: "alice", Spec: spec})
	return h
}

func blob(content string) (name, digest string) {
	sum := sha256.Sum256([]byte(content))
	return "blob/sha256/" + hex.EncodeToString(sum[:]), "sha256:" + hex.EncodeToString(sum[:])
}

// TestANodeStagesAndReturnsTheDataOfWhatItHolds: through the gate, the
// node holding a job stages its inputs (a file and a folder), stores its
// output and its log, all of it in the submitter's store; once the
// attempt stopped, nothing more.
func TestANodeStagesAndReturnsTheDataOfWhatItHolds(t *testing.T) {
	t.Parallel()
	w := start(t)
	dir := t.TempDir()
	for _, f := range []string{"a.txt", "sub/b.txt"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("content of "+f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	folder, err := stage.Upload(w.ctx, w.alice, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	folder.Name = "folder"
	file := w.stage(t, "input", "the input")
	h := w.hold(t, "job-1", "n1", file, folder)
	st := w.n1.Store("job-1", 1)

	into := t.TempDir()
	for _, ref := range []events.DataRef{file, folder} {
		if err := stage.Download(w.ctx, st, ref, filepath.Join(into, ref.Name), nil); err != nil {
			t.Fatalf("n1 stages %s: %v", ref.Name, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(into, "folder", "sub", "b.txt")); err != nil || string(b) != "content of sub/b.txt" {
		t.Errorf("the folder staged: %q, %v", b, err)
	}

	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "result.txt"), []byte("the result"), 0o600); err != nil {
		t.Fatal(err)
	}
	decl := []events.OutputDecl{{Path: "result.txt", Required: true}}
	collected, err := stage.Collect(w.ctx, st, out, decl, 1<<20)
	if err != nil {
		t.Fatalf("n1 returns the output: %v", err)
	}
	logs := stage.NewJobLog(st, "job-1", 1, 1<<20)
	if _, err := io.WriteString(logs.Stdout(), "hello\n"); err != nil {
		t.Fatal(err)
	}
	if err := logs.Flush(w.ctx, true); err != nil {
		t.Fatalf("n1 stores the log: %v", err)
	}
	// What it stored is in alice's store, as a service reads it.
	if err := stage.Fetch(w.ctx, w.alice, collected.Files, t.TempDir(), nil); err != nil {
		t.Errorf("the output in alice's store: %v", err)
	}
	if x, err := stage.ReadLogIndex(w.ctx, w.alice, "job-1", 1); err != nil || !x.Done {
		t.Errorf("the log in alice's store: %+v, %v", x, err)
	}

	// Another node's stop of the attempt ends nothing; n1's own does.
	other := h
	other.Node = "n2"
	w.append(t, "job-1", &events.RunStopped{Hold: other, Outcome: events.Failed})
	if _, err := st.Stat(w.ctx, "log/job-1/1/index"); err != nil {
		t.Errorf("after n2's stop: %v", err)
	}
	w.append(t, "job-1", &events.RunStopped{Hold: h, Outcome: events.Succeeded})
	// Refused once the gate has heard of the stop, published as it was
	// stored, and looked at the log again.
	for deadline := time.Now().Add(5 * time.Second); ; {
		var rc io.ReadCloser
		rc, err = st.Get(w.ctx, "blob/sha256/"+strings.TrimPrefix(file.Digest, "sha256:"))
		if err != nil || time.Now().After(deadline) {
			break
		}
		rc.Close()
	}
	if !errors.Is(err, gate.ErrRefused) || !strings.Contains(err.Error(), "is over") {
		t.Errorf("n1 reads its job's input after its stop: %v, want refused, the hold over", err)
	}
	if err := st.Put(w.ctx, "log/job-1/1/index", "sha256:00", 0, strings.NewReader("")); !errors.Is(err, gate.ErrRefused) {
		t.Errorf("n1 writes its job's log after its stop: %v, want refused", err)
	}
}

// TestANodeGetsNothingElse: no other node reaches a job's data; the node
// that holds it reaches nothing but its inputs, its output and its own
// log: not another job's input, not an object with bytes its name does not
// say, not a part list of another file, not another attempt's log; it
// deletes nothing.
func TestANodeGetsNothingElse(t *testing.T) {
	t.Parallel()
	w := start(t)
	mine := w.stage(t, "mine", "job-1's input")
	theirs := w.stage(t, "theirs", "job-2's input, a secret")
	w.hold(t, "job-1", "n1", mine)
	w.hold(t, "job-2", "n2", theirs)
	theirName := "blob/sha256/" + strings.TrimPrefix(theirs.Digest, "sha256:")
	myName := "blob/sha256/" + strings.TrimPrefix(mine.Digest, "sha256:")

	if _, err := w.n2.Store("job-1", 1).Get(w.ctx, myName); !errors.Is(err, gate.ErrRefused) || !strings.Contains(err.Error(), "not held on node n2") {
		t.Errorf("n2 reads job-1's input: %v", err)
	}
	st := w.n1.Store("job-1", 1)
	for _, name := range []string{theirName, "log/job-2/1/index", "parts/sha256/" + strings.TrimPrefix(theirs.Digest, "sha256:")} {
		if rc, err := st.Get(w.ctx, name); err == nil {
			rc.Close()
			t.Errorf("n1 read %s", name)
		}
	}
	if _, err := st.Stat(w.ctx, theirName); !errors.Is(err, stage.ErrNotFound) {
		t.Errorf("n1 asked whether alice has job-2's input, and was told: %v", err)
	}
	if _, err := w.n1.Store("job-2", 1).Get(w.ctx, theirName); !errors.Is(err, gate.ErrRefused) {
		t.Errorf("n1 reads job-2's input as job-2: %v", err)
	}
	if _, err := w.n1.Store("job-9", 1).Stat(w.ctx, myName); !errors.Is(err, gate.ErrRefused) {
		t.Errorf("n1 asks of a job never held: %v", err)
	}

	// Bytes under a name that is not their digest: a blob replaced.
	forged := "n1's bytes"
	if err := st.Put(w.ctx, theirName, theirs.Digest, int64(len(forged)), strings.NewReader(forged)); err == nil {
		t.Error("n1 stored its bytes as job-2's input")
	}
	name, digest := blob(forged)
	if err := st.Put(w.ctx, name, theirs.Digest, int64(len(forged)), strings.NewReader(forged)); !errors.Is(err, gate.ErrRefused) {
		t.Errorf("n1 stored under a blob name another digest: %v", err)
	}
	if err := st.Put(w.ctx, name, digest, int64(len(forged)), strings.NewReader(forged)); err != nil {
		t.Errorf("n1 stores a blob of its output: %v", err)
	}
	// A part list that makes job-2's input read as n1's bytes.
	list := []byte(`{"version":1,"size":` + itoa(len(forged)) + `,"parts":[{"digest":"` + digest + `","size":` + itoa(len(forged)) + `}]}`)
	_, ld := blob(string(list))
	if err := st.Put(w.ctx, "parts/sha256/"+strings.TrimPrefix(theirs.Digest, "sha256:"), ld, int64(len(list)), bytes.NewReader(list)); !errors.Is(err, stage.ErrCorrupt) {
		t.Errorf("n1 stored a part list of job-2's input naming its bytes: %v", err)
	}
	if err := st.Put(w.ctx, "log/job-1/2/index", digest, int64(len(forged)), strings.NewReader(forged)); !errors.Is(err, gate.ErrRefused) {
		t.Errorf("n1 wrote attempt 2's log: %v", err)
	}
	if err := st.Delete(w.ctx, myName); !errors.Is(err, gate.ErrRefused) {
		t.Errorf("n1 deleted: %v", err)
	}
	// Job-2's input is as alice staged it.
	if err := stage.Download(w.ctx, w.alice, theirs, filepath.Join(t.TempDir(), "x"), nil); err != nil {
		t.Errorf("job-2's input: %v", err)
	}
}

// TestANodeStagesTheOutputOfAJobItRunsAfter: from_job data is read as the
// job that stages it is held.
func TestANodeStagesTheOutputOfAJobItRunsAfter(t *testing.T) {
	t.Parallel()
	w := start(t)
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "model"), []byte("weights"), 0o600); err != nil {
		t.Fatal(err)
	}
	decl := []events.OutputDecl{{Path: "model", Required: true}}
	c, err := stage.Collect(w.ctx, w.alice, out, decl, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	h := w.hold(t, "first", "n1")
	w.append(t, "first", &events.RunStopped{Hold: h, Outcome: events.Succeeded, Output: c})
	w.append(t, "first", &events.OutputReturned{Hold: h, Outcome: events.Succeeded, Files: c.Files, Bytes: c.Bytes, Manifest: c.Manifest, Missing: []string{}})
	w.append(t, "first", &events.ComputeReleased{Hold: h, Outcome: events.Succeeded, Final: true})
	w.hold(t, "then", "n2", events.DataRef{Name: "model", FromJob: "first"})
	st := w.n2.Store("then", 1)
	ref, err := stage.OutputRef(w.ctx, st, c.Manifest, c.Files)
	if err != nil {
		t.Fatalf("n2 resolves the output it stages: %v", err)
	}
	if err := stage.Download(w.ctx, st, ref, filepath.Join(t.TempDir(), "model"), nil); err != nil {
		t.Errorf("n2 stages the output of the job it runs after: %v", err)
	}
}

// TestTheGateMakesANodesConsumersOnly: a node's consumer, as it asks;
// another's, or one on another stream, refused.
func TestTheGateMakesANodesConsumersOnly(t *testing.T) {
	t.Parallel()
	w := start(t)
	c := gate.NodeConsumers("n1")[0]
	cc := jetstream.ConsumerConfig{Durable: c.Name(), FilterSubject: c.Topic, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 100, AckWait: 10 * time.Second}
	if err := w.n1.MakeConsumer(w.ctx, events.Stream, cc); err != nil {
		t.Fatalf("n1's consumer: %v", err)
	}
	made, err := w.js.Consumer(w.ctx, events.Stream, c.Name())
	if err != nil {
		t.Fatal(err)
	}
	if got := made.CachedInfo().Config; got.FilterSubject != c.Topic || got.AckWait != 10*time.Second || got.DeliverSubject != "" {
		t.Errorf("made %+v", got)
	}
	for _, bad := range []jetstream.ConsumerConfig{
		{Durable: gate.NodeConsumers("n2")[0].Name(), FilterSubject: events.HeldSubject("n2"), MaxAckPending: 1},
		{Durable: c.Name(), FilterSubject: events.HeldSubject("n2"), MaxAckPending: 1},
		{Durable: c.Name(), FilterSubject: c.Topic, MaxAckPending: 1, DeliverSubject: "e31.job.x.stopped.n1"},
		{Durable: c.Name(), FilterSubject: c.Topic, MaxAckPending: 1 << 20},
	} {
		if err := w.n1.MakeConsumer(w.ctx, events.Stream, bad); !errors.Is(err, gate.ErrRefused) {
			t.Errorf("n1 had %+v made: %v", bad, err)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestALargeObjectComesInPieces: an object of several pieces goes through
// a session and back, byte for byte; one whose bytes are not its name's
// digest is stored not at all.
func TestALargeObjectComesInPieces(t *testing.T) {
	t.Parallel()
	w := start(t)
	w.hold(t, "job-1", "n1")
	st := w.n1.Store("job-1", 1)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*gate.ChunkBytes/16+100)
	name, digest := blob(string(big))
	if err := st.Put(w.ctx, name, digest, int64(len(big)), bytes.NewReader(big)); err != nil {
		t.Fatalf("put %d bytes: %v", len(big), err)
	}
	rc, err := w.alice.Get(w.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, big) {
		t.Errorf("alice's store has %d bytes (%v), want the %d put", len(got), err, len(big))
	}
	bad := append([]byte{}, big...)
	bad[len(bad)-1] ^= 1
	name2, digest2 := blob(string(big) + "x")
	if err := st.Put(w.ctx, name2, digest2, int64(len(bad)), bytes.NewReader(bad)); err == nil {
		t.Error("bytes that are not their name's digest were stored")
	}
	if _, err := w.alice.Stat(w.ctx, name2); !errors.Is(err, stage.ErrNotFound) {
		t.Errorf("after a put of the wrong bytes: %v, want nothing stored", err)
	}
}
