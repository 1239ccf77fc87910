package stage_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// putManifest stores raw manifest JSON the way an attacker with write access
// to the bucket could, content addressed so that it passes the digest check,
// and returns a ref to it.
func putManifest(t *testing.T, e *env, raw string, files int, size int64) events.DataRef {
	t.Helper()
	b := []byte(raw)
	if err := e.store.Put(e.ctx, blobOf(b), digestOf(b), int64(len(b)), bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	return events.DataRef{Name: "evil", Kind: "dir", Digest: digestOf(b), Files: files, Bytes: size}
}

func TestDownloadRefusesHostileManifest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	payload := []byte("pwned")
	if err := e.store.Put(e.ctx, blobOf(payload), digestOf(payload), 5, bytes.NewReader(payload)); err != nil {
		t.Fatal(err)
	}
	d := digestOf(payload)
	file := func(p string) string {
		return fmt.Sprintf(`{"path":%q,"mode":"0644","size":5,"digest":%q}`, p, d)
	}
	tests := []struct {
		name  string
		raw   string
		files int
		want  error
	}{
		{"dot dot", `{"version":1,"files":[` + file("../escape") + `]}`, 1, stage.ErrUnsafePath},
		{"deep dot dot", `{"version":1,"files":[` + file("a/../../escape") + `]}`, 1, stage.ErrUnsafePath},
		{"absolute", `{"version":1,"files":[` + file("/tmp/escape") + `]}`, 1, stage.ErrUnsafePath},
		{"dot", `{"version":1,"files":[` + file("./x") + `]}`, 1, stage.ErrUnsafePath},
		{"empty", `{"version":1,"files":[` + file("") + `]}`, 1, stage.ErrUnsafePath},
		{"empty dir dot dot", `{"version":1,"files":[],"dirs":["../d"]}`, 0, stage.ErrUnsafePath},
		{"twice", `{"version":1,"files":[` + file("x") + `,` + file("x") + `]}`, 2, stage.ErrBadManifest},
		{"file as a parent", `{"version":1,"files":[` + file("x") + `,` + file("x/y") + `]}`, 2, stage.ErrBadManifest},
		{"setuid", `{"version":1,"files":[{"path":"x","mode":"4755","size":5,"digest":"` + d + `"}]}`, 1, stage.ErrBadManifest},
		{"unknown field", `{"version":1,"files":[],"owner":"root"}`, 0, stage.ErrBadManifest},
		{"newer version", `{"version":2,"files":[]}`, 0, stage.ErrBadManifest},
		{"bad digest", `{"version":1,"files":[{"path":"x","mode":"0644","size":5,"digest":"md5:abc"}]}`, 1, stage.ErrBadManifest},
		{"negative size", `{"version":1,"files":[{"path":"x","mode":"0644","size":-5,"digest":"` + d + `"}]}`, 1, stage.ErrBadManifest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref := putManifest(t, e, tc.raw, tc.files, int64(5*tc.files))
			parent := filepath.Join(t.TempDir(), "a", "b")
			err := stage.Download(e.ctx, e.store, ref, filepath.Join(parent, "evil"), nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("download = %v, want %v", err, tc.want)
			}
			if err := stage.Verify(e.ctx, e.store, ref); !errors.Is(err, tc.want) {
				t.Errorf("verify = %v, want %v", err, tc.want)
			}
			// Nothing anywhere near: not in the parent, not beside it.
			for _, dir := range []string{parent, filepath.Dir(parent), filepath.Dir(filepath.Dir(parent))} {
				entries, _ := os.ReadDir(dir)
				for _, en := range entries {
					if en.Name() != "b" && en.Name() != "a" {
						t.Errorf("%s holds %s", dir, en.Name())
					}
				}
			}
		})
	}
}

func TestFetchRefusesUnsafePaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	payload := []byte("pwned")
	if err := e.store.Put(e.ctx, blobOf(payload), digestOf(payload), 5, bytes.NewReader(payload)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../escape", "/tmp/escape", "a/../../escape", "", "."} {
		base := t.TempDir()
		dest := filepath.Join(base, "dest")
		files := []events.OutputFile{
			{Path: "fine.txt", Bytes: 5, Digest: digestOf(payload)},
			{Path: p, Bytes: 5, Digest: digestOf(payload)},
		}
		if err := stage.Fetch(e.ctx, e.store, files, dest, nil); !errors.Is(err, stage.ErrUnsafePath) {
			t.Errorf("fetch %q = %v, want ErrUnsafePath", p, err)
		}
		// Refused before anything was written.
		if entries, _ := os.ReadDir(base); len(entries) != 0 {
			t.Errorf("fetch %q wrote %v", p, entries)
		}
	}
}

// A symlink already in the destination cannot carry a write outside it.
func TestFetchDoesNotFollowLinksOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	payload := []byte("pwned")
	if err := e.store.Put(e.ctx, blobOf(payload), digestOf(payload), 5, bytes.NewReader(payload)); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	dest := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dest, "res")); err != nil {
		t.Fatal(err)
	}
	files := []events.OutputFile{{Path: "res/x", Bytes: 5, Digest: digestOf(payload)}}
	if err := stage.Fetch(e.ctx, e.store, files, dest, nil); err == nil {
		t.Fatal("fetch through a link out of dest succeeded")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("wrote outside dest: %v", entries)
	}
}

func TestFetchReplacesAndRefetches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := t.TempDir()
	writeFile(t, filepath.Join(out, "r", "x.txt"), []byte("result"), 0o644)
	c, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "r"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	writeFile(t, filepath.Join(dest, "r", "x.txt"), []byte("stale"), 0o644)
	for range 2 {
		if err := stage.Fetch(e.ctx, e.store, c.Files, dest, nil); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "r", "x.txt")); string(b) != "result" {
		t.Fatalf("got %q", b)
	}
}

// An earlier job's output becomes a later job's input without the client.
func TestDirRef(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := t.TempDir()
	writeFile(t, filepath.Join(out, "model", "weights.bin"), randomBytes(20, 50_000), 0o644)
	writeFile(t, filepath.Join(out, "model", "config.json"), []byte(`{"k":1}`), 0o644)
	writeFile(t, filepath.Join(out, "summary.txt"), []byte("ok"), 0o644)
	c, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "**"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := stage.DirRef(e.ctx, e.store, c.Files)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Kind != "dir" || ref.Files != 3 || ref.Bytes != c.Bytes {
		t.Fatalf("ref = %+v", ref)
	}
	if err := stage.Verify(e.ctx, e.store, ref); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "data", "model")
	if err := stage.Download(e.ctx, e.store, ref, dest, nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, readTree(t, out), readTree(t, dest))

	// The same files in another order are the same folder.
	rev := append([]events.OutputFile(nil), c.Files...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if again, err := stage.DirRef(e.ctx, e.store, rev); err != nil || again != ref {
		t.Errorf("DirRef of the same files = %+v, %v; want %+v", again, err, ref)
	}

	// Files that are not stored cannot make a folder.
	missing := append(c.Files, events.OutputFile{Path: "ghost", Bytes: 1, Digest: digestOf([]byte("g"))})
	if _, err := stage.DirRef(e.ctx, e.store, missing); !errors.Is(err, stage.ErrNotFound) {
		t.Errorf("DirRef with a missing file = %v, want ErrNotFound", err)
	}
	unsafe := append(c.Files, events.OutputFile{Path: "../x", Bytes: 2, Digest: digestOf([]byte("ok"))})
	if _, err := stage.DirRef(e.ctx, e.store, unsafe); !errors.Is(err, stage.ErrUnsafePath) {
		t.Errorf("DirRef with ../x = %v, want ErrUnsafePath", err)
	}
}
