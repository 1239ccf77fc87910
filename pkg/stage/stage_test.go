package stage_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

func TestRoundTripFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	data := randomBytes(1, 300_000) // three chunks, one blob
	src := filepath.Join(dir, "input.bin")
	writeFile(t, src, data, 0o600)

	rec := &recorder{}
	ref, err := stage.Upload(e.ctx, e.store, src, rec)
	if err != nil {
		t.Fatal(err)
	}
	want := events.DataRef{Digest: digestOf(data), Kind: "file", Bytes: int64(len(data)), Files: 1}
	if ref != want {
		t.Fatalf("ref = %+v, want %+v", ref, want)
	}
	if got := strings.Join(rec.phases, ","); got != "hash input.bin,upload input.bin" {
		t.Errorf("phases = %s", got)
	}
	for i, total := range rec.totals {
		if total != int64(len(data)) || rec.added[i] != total {
			t.Errorf("phase %s: total %d, added %d, want %d", rec.phases[i], total, rec.added[i], len(data))
		}
	}
	if err := stage.Verify(e.ctx, e.store, ref); err != nil {
		t.Fatal(err)
	}

	dest := filepath.Join(dir, "data", "input")
	if err := stage.Download(e.ctx, e.store, ref, dest, nil); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dest)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("downloaded bytes differ")
	}
	if fi, _ := os.Stat(dest); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (readable by the job's user)", fi.Mode().Perm())
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "data", ".e31-*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	// dest is never replaced.
	if err := stage.Download(e.ctx, e.store, ref, dest, nil); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second download = %v, want fs.ErrExist", err)
	}
}

func TestRoundTripEmptyFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "empty")
	writeFile(t, src, nil, 0o644)
	ref, err := stage.Upload(e.ctx, e.store, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Digest != digestOf(nil) || ref.Bytes != 0 {
		t.Fatalf("ref = %+v", ref)
	}
	dest := filepath.Join(dir, "out")
	if err := stage.Download(e.ctx, e.store, ref, dest, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dest); err != nil || len(b) != 0 {
		t.Fatalf("read %d bytes, %v", len(b), err)
	}
}

// makeFolder writes a nested folder with an executable, an empty file, an
// empty directory, a symlink to a file inside and one to a file outside.
func makeFolder(t *testing.T, root string) tree {
	t.Helper()
	outside := filepath.Join(t.TempDir(), "outside.txt")
	writeFile(t, outside, []byte("linked from elsewhere"), 0o644)
	writeFile(t, filepath.Join(root, "a.txt"), []byte("alpha"), 0o644)
	writeFile(t, filepath.Join(root, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	writeFile(t, filepath.Join(root, "sub", "b.bin"), randomBytes(2, 200_000), 0o600)
	writeFile(t, filepath.Join(root, "sub", "deeper", "c.txt"), []byte("gamma"), 0o644)
	writeFile(t, filepath.Join(root, "sub", "zero"), nil, 0o644)
	if err := os.MkdirAll(filepath.Join(root, "empty", "nested"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(root, "link-in")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link-out")); err != nil {
		t.Fatal(err)
	}
	// What comes back: modes normalized to 0644/0755, links as their targets.
	return tree{
		".":                {mode: fs.ModeDir | 0o755},
		"a.txt":            {data: []byte("alpha"), mode: 0o644},
		"run.sh":           {data: []byte("#!/bin/sh\necho hi\n"), mode: 0o755},
		"sub":              {mode: fs.ModeDir | 0o755},
		"sub/b.bin":        {data: randomBytes(2, 200_000), mode: 0o644},
		"sub/deeper":       {mode: fs.ModeDir | 0o755},
		"sub/deeper/c.txt": {data: []byte("gamma"), mode: 0o644},
		"sub/zero":         {data: []byte{}, mode: 0o644},
		"empty":            {mode: fs.ModeDir | 0o755},
		"empty/nested":     {mode: fs.ModeDir | 0o755},
		"link-in":          {data: []byte("alpha"), mode: 0o644},
		"link-out":         {data: []byte("linked from elsewhere"), mode: 0o644},
	}
}

func TestRoundTripFolder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := filepath.Join(t.TempDir(), "clips")
	want := makeFolder(t, src)

	ref, err := stage.Upload(e.ctx, e.store, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Kind != "dir" || ref.Files != 7 || ref.Bytes != int64(5+18+200_000+5+0+5+21) {
		t.Fatalf("ref = %+v", ref)
	}
	if err := stage.Verify(e.ctx, e.store, ref); err != nil {
		t.Fatal(err)
	}

	dest := filepath.Join(t.TempDir(), "data", "clips")
	if err := stage.Download(e.ctx, e.store, ref, dest, nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, want, readTree(t, dest))
	// "link-in" has the content of "a.txt": it was stored once, not twice
	// at the same time, which would leave the chunks of one behind.
	assertNoStrayChunks(t, e)

	// The same folder uploaded from elsewhere has the same digest; so does
	// the downloaded copy (its links are files now, with the same content).
	again, err := stage.Upload(e.ctx, e.store, dest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again != ref {
		t.Errorf("re-upload of the download = %+v, want %+v", again, ref)
	}
}

func TestUploadRefusesWhatItCannotStage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "ok"), []byte("ok"), 0o644)
	if err := os.Symlink(t.TempDir(), filepath.Join(src, "dirlink")); err != nil {
		t.Fatal(err)
	}
	_, err := stage.Upload(e.ctx, e.store, src, nil)
	if !errors.Is(err, stage.ErrUnsupported) || !strings.Contains(err.Error(), "dirlink") {
		t.Fatalf("upload = %v, want ErrUnsupported naming dirlink", err)
	}
}

func TestReuploadStoresNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := filepath.Join(t.TempDir(), "clips")
	makeFolder(t, src)
	file := filepath.Join(t.TempDir(), "one")
	writeFile(t, file, randomBytes(3, 1000), 0o644)

	first, err := stage.Upload(e.ctx, e.store, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	firstFile, err := stage.Upload(e.ctx, e.store, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	objects, state := e.objects(t), e.streamState(t)

	cs := &countingStore{Store: e.store}
	second, err := stage.Upload(e.ctx, cs, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	secondFile, err := stage.Upload(e.ctx, cs, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second != first || secondFile != firstFile {
		t.Errorf("refs changed: %+v %+v, then %+v %+v", first, firstFile, second, secondFile)
	}
	if cs.puts.Load() != 0 {
		t.Errorf("re-upload put %d objects, %d bytes", cs.puts.Load(), cs.bytes.Load())
	}
	if got := e.objects(t); strings.Join(got, " ") != strings.Join(objects, " ") {
		t.Errorf("objects %v, then %v", objects, got)
	}
	if got := e.streamState(t); got.Msgs != state.Msgs || got.Bytes != state.Bytes {
		t.Errorf("bucket went from %d messages, %d bytes to %d, %d", state.Msgs, state.Bytes, got.Msgs, got.Bytes)
	}
	// Two files with the same content are one object: "link-in" is "a.txt"
	// and the manifest, blob per distinct content, nothing else.
	if len(objects) != 8 {
		t.Errorf("%d objects, want 8 (6 distinct contents, a manifest, one more file): %v", len(objects), objects)
	}
}

func TestVerifyNamesMissingObject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	src := filepath.Join(t.TempDir(), "clips")
	makeFolder(t, src)
	ref, err := stage.Upload(e.ctx, e.store, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref.Name = "clips"
	if err := e.store.Delete(e.ctx, blobOf([]byte("gamma"))); err != nil {
		t.Fatal(err)
	}
	err = stage.Verify(e.ctx, e.store, ref)
	if !errors.Is(err, stage.ErrNotFound) || !strings.Contains(err.Error(), "sub/deeper/c.txt") || !strings.Contains(err.Error(), "clips") {
		t.Fatalf("verify = %v, want ErrNotFound naming clips and sub/deeper/c.txt", err)
	}

	// The manifest itself.
	if err := e.store.Delete(e.ctx, "blob/sha256/"+strings.TrimPrefix(ref.Digest, "sha256:")); err != nil {
		t.Fatal(err)
	}
	if err := stage.Verify(e.ctx, e.store, ref); !errors.Is(err, stage.ErrNotFound) || !strings.Contains(err.Error(), ref.Digest) {
		t.Fatalf("verify = %v, want ErrNotFound naming the manifest", err)
	}

	// A file.
	err = stage.Verify(e.ctx, e.store, events.DataRef{Name: "model", Kind: "file", Digest: digestOf([]byte("never stored")), Bytes: 12})
	if !errors.Is(err, stage.ErrNotFound) || !strings.Contains(err.Error(), "model") {
		t.Fatalf("verify = %v, want ErrNotFound naming model", err)
	}

	// A reference that does not add up.
	bad := events.DataRef{Name: "bad", Kind: "file", Digest: "sha256:ABC"}
	if err := stage.Verify(e.ctx, e.store, bad); !errors.Is(err, stage.ErrBadRef) {
		t.Fatalf("verify = %v, want ErrBadRef", err)
	}
}

func TestVerifyNoticesReplacedObject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	file := filepath.Join(t.TempDir(), "f")
	data := []byte("the real content")
	writeFile(t, file, data, 0o644)
	ref, err := stage.Upload(e.ctx, e.store, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.bucket.PutBytes(e.ctx, blobOf(data), []byte("something else!!")); err != nil {
		t.Fatal(err)
	}
	if err := stage.Verify(e.ctx, e.store, ref); !errors.Is(err, stage.ErrCorrupt) {
		t.Fatalf("verify = %v, want ErrCorrupt", err)
	}
	// Uploading again repairs it.
	if _, err := stage.Upload(e.ctx, e.store, file, nil); err != nil {
		t.Fatal(err)
	}
	if err := stage.Verify(e.ctx, e.store, ref); err != nil {
		t.Fatal(err)
	}
}
