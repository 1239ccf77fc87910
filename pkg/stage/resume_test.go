package stage_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// The tests in this file shrink stage.PartSize, so they do not run in
// parallel; every parallel test of the package runs after them.

// partNames lists the object names of data cut into parts of size n.
func partNames(data []byte, n int) []string {
	var names []string
	for off := 0; off < len(data); off += n {
		names = append(names, blobOf(data[off:min(off+n, len(data))]))
	}
	return names
}

func TestLargeFileRoundTripInParts(t *testing.T) {
	const partSize = 256 << 10
	setPartSize(t, partSize)
	e := newEnv(t)
	data := randomBytes(10, 3*partSize+1234) // four parts, the last short
	src := filepath.Join(t.TempDir(), "big")
	writeFile(t, src, data, 0o644)

	ref, err := stage.Upload(e.ctx, e.store, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Digest != digestOf(data) || ref.Bytes != int64(len(data)) {
		t.Fatalf("ref = %+v, want the digest and size of the whole file", ref)
	}
	names := e.objects(t)
	want := append(partNames(data, partSize), "parts/sha256/"+strings.TrimPrefix(ref.Digest, "sha256:"))
	if len(names) != len(want) {
		t.Fatalf("objects %v, want %v", names, want)
	}
	for _, w := range want {
		if _, err := e.store.Stat(e.ctx, w); err != nil {
			t.Errorf("%s: %v", w, err)
		}
	}
	if err := stage.Verify(e.ctx, e.store, ref); err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: e.store}
	if again, err := stage.Upload(e.ctx, cs, src, nil); err != nil || again != ref || cs.puts.Load() != 0 {
		t.Fatalf("re-upload: %+v, %v, %d puts; want the same ref and nothing put", again, err, cs.puts.Load())
	}
	dest := filepath.Join(t.TempDir(), "big")
	if err := stage.Download(e.ctx, e.store, ref, dest, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, data) {
		t.Fatal("downloaded bytes differ")
	}

	// A missing part: Verify names it, Download fails.
	if err := e.store.Delete(e.ctx, partNames(data, partSize)[2]); err != nil {
		t.Fatal(err)
	}
	ref.Name = "big"
	if err := stage.Verify(e.ctx, e.store, ref); !errors.Is(err, stage.ErrNotFound) || !strings.Contains(err.Error(), "part 2") {
		t.Fatalf("verify = %v, want ErrNotFound naming part 2", err)
	}
	if err := stage.Download(e.ctx, e.store, ref, filepath.Join(t.TempDir(), "big"), nil); !errors.Is(err, stage.ErrNotFound) {
		t.Fatalf("download = %v, want ErrNotFound", err)
	}

	// A file stored in parts reads the same whatever PartSize is now.
	if _, err := stage.Upload(e.ctx, e.store, src, nil); err != nil {
		t.Fatal(err)
	}
	stage.PartSize = 64 << 20
	dest2 := filepath.Join(t.TempDir(), "big")
	if err := stage.Download(e.ctx, e.store, ref, dest2, nil); err != nil {
		t.Fatal(err)
	}
}

// A part list that names the wrong parts (each intact on its own) is caught
// when the parts are joined.
func TestForgedPartListDetected(t *testing.T) {
	const partSize = 128 << 10
	setPartSize(t, partSize)
	e := newEnv(t)
	data := randomBytes(11, 2*partSize)
	other := randomBytes(12, 2*partSize)
	for i, d := range [][]byte{data, other} {
		src := filepath.Join(t.TempDir(), "f")
		writeFile(t, src, d, 0o644)
		if _, err := stage.Upload(e.ctx, e.store, src, nil); err != nil {
			t.Fatal(i, err)
		}
	}
	name := "parts/sha256/" + strings.TrimPrefix(digestOf(data), "sha256:")
	forged, err := e.bucket.GetBytes(e.ctx, "parts/sha256/"+strings.TrimPrefix(digestOf(other), "sha256:"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.bucket.PutBytes(e.ctx, name, forged); err != nil {
		t.Fatal(err)
	}
	ref := events.DataRef{Name: "f", Kind: "file", Digest: digestOf(data), Bytes: int64(len(data)), Files: 1}
	err = stage.Download(e.ctx, e.store, ref, filepath.Join(t.TempDir(), "f"), nil)
	if !errors.Is(err, stage.ErrCorrupt) {
		t.Fatalf("download = %v, want ErrCorrupt", err)
	}
}

func TestInterruptedUploadResumes(t *testing.T) {
	const partSize = 256 << 10
	setPartSize(t, partSize)
	e := newEnv(t)
	data := randomBytes(13, 10*partSize+777) // eleven parts
	src := filepath.Join(t.TempDir(), "big")
	writeFile(t, src, data, 0o644)
	parts := partNames(data, partSize)

	// Cancel in the middle of the fifth part.
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	_, err := stage.Upload(ctx, e.store, src, &cancelAfter{n: 4*partSize + partSize/2, cancel: cancel})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("upload = %v, want context.Canceled", err)
	}
	stored := 0
	for _, p := range parts {
		if _, err := e.store.Stat(e.ctx, p); err == nil {
			stored++
		}
	}
	if stored != 4 {
		t.Fatalf("%d parts stored before the cancel, want 4", stored)
	}
	// The aborted part left no chunks behind: every message in the bucket
	// belongs to a stored object (one for its metadata, one per chunk).
	assertNoStrayChunks(t, e)

	cs := &countingStore{Store: e.store}
	rec := &recorder{}
	ref, err := stage.Upload(e.ctx, cs, src, rec)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cs.puts.Load(), int64(len(parts)-stored+1); got != want {
		t.Errorf("resumed upload put %d objects, want %d (the missing parts and the part list)", got, want)
	}
	if got, want := cs.bytes.Load(), int64(len(data)-stored*partSize); got < want || got > want+4096 {
		t.Errorf("resumed upload sent %d bytes, want %d and a part list", got, want)
	}
	// Progress still counts the whole file: stored parts count as done.
	if rec.added[1] != int64(len(data)) {
		t.Errorf("progress reached %d of %d", rec.added[1], len(data))
	}
	if ref.Digest != digestOf(data) {
		t.Fatalf("ref = %+v", ref)
	}
	assertNoStrayChunks(t, e)
	dest := filepath.Join(t.TempDir(), "big")
	if err := stage.Download(e.ctx, e.store, ref, dest, nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != ref.Digest {
		t.Fatalf("downloaded %s, want %s", got, ref.Digest)
	}
}

func assertNoStrayChunks(t *testing.T, e *env) {
	t.Helper()
	// Deleted objects keep a marker: one message, no chunks.
	infos, err := e.bucket.List(e.ctx, jetstream.ListObjectsShowDeleted())
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, i := range infos {
		want += 1 + uint64(i.Chunks)
	}
	if got := e.streamState(t).Msgs; got != want {
		t.Errorf("bucket holds %d messages, its objects account for %d", got, want)
	}
}

// A file that changes between hashing and sending is refused, and nothing
// is stored under its digest.
func TestChangedFileRefused(t *testing.T) {
	const partSize = 128 << 10
	setPartSize(t, partSize)
	e := newEnv(t)
	data := randomBytes(14, 3*partSize)
	src := filepath.Join(t.TempDir(), "moving")
	writeFile(t, src, data, 0o644)
	changer := &changeOnUpload{path: src, t: t}
	_, err := stage.Upload(e.ctx, e.store, src, changer)
	if !errors.Is(err, stage.ErrChanged) {
		t.Fatalf("upload = %v, want ErrChanged", err)
	}
	if _, err := e.store.Stat(e.ctx, partNames(data, partSize)[2]); !errors.Is(err, stage.ErrNotFound) {
		t.Errorf("the changed part was stored: %v", err)
	}
	assertNoStrayChunks(t, e)
}

// changeOnUpload rewrites the end of a file once sending starts.
type changeOnUpload struct {
	path string
	t    *testing.T
	done bool
}

func (c *changeOnUpload) Start(_ int64, label string) {
	if strings.HasPrefix(label, "upload") && !c.done {
		c.done = true
		f, err := os.OpenFile(c.path, os.O_WRONLY, 0)
		if err != nil {
			c.t.Error(err)
			return
		}
		defer f.Close()
		fi, _ := f.Stat()
		if _, err := f.WriteAt([]byte("changed"), fi.Size()-7); err != nil {
			c.t.Error(err)
		}
	}
}
func (c *changeOnUpload) Add(int64) {}
func (c *changeOnUpload) Done()     {}

// Cancelling a read returns at once, although nats.go's own object reader
// would wait for its deadline (here an hour).
func TestGetCancelReturnsPromptly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stage.WithGetTimeout(time.Hour, 1<<20))
	if _, err := e.bucket.PutBytes(e.ctx, "x", []byte("alpha")); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		ctx, cancel := context.WithCancel(e.ctx)
		rc, err := e.store.Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			cancel()
		} else {
			go cancel()
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		cancel()
		if err == nil && string(b) != "alpha" || err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("read %q, %v", b, err)
		}
	}
}
