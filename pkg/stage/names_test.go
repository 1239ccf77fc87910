package stage_test

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/stage"
)

func TestNamesSayWhatTheyHold(t *testing.T) {
	t.Parallel()
	hex := strings.Repeat("ab", 32)
	d := "sha256:" + hex
	if got, ok := stage.BlobDigest("blob/sha256/" + hex); !ok || got != d {
		t.Errorf("BlobDigest = %q, %v", got, ok)
	}
	if got, ok := stage.PartsDigest("parts/sha256/" + hex); !ok || got != d {
		t.Errorf("PartsDigest = %q, %v", got, ok)
	}
	for _, name := range []string{"parts/sha256/" + hex, "blob/sha256/xyz", "blob/sha256/" + hex[2:], "log/j/1/index", ""} {
		if _, ok := stage.BlobDigest(name); ok {
			t.Errorf("BlobDigest(%q) names a blob", name)
		}
	}
	for name, want := range map[string]bool{
		"log/j/1/index":                     true,
		"log/j/1/stdout/0000000000000000":   true,
		"log/j/1/stderr/0000000001048576":   true,
		"log/j/2/stdout/0000000000000000":   false,
		"log/k/1/stdout/0000000000000000":   false,
		"log/j/1/stdin/0000000000000000":    false,
		"log/j/1/stdout/0":                  false,
		"log/j/1/stdout/0000000000000000/x": false,
		"log/j/1/../2/index":                false,
		"log/j/10/index":                    false,
		"blob/sha256/" + hex:                false,
	} {
		if got := stage.IsLogOf(name, "j", 1); got != want {
			t.Errorf("IsLogOf(%q, j, 1) = %v, want %v", name, got, want)
		}
	}
}

// TestCheckPartList: the part list Upload stores of a large file is the
// file's; under another file's digest, or malformed, it is not.
func TestCheckPartList(t *testing.T) {
	e := newEnv(t)
	setPartSize(t, 1<<10)
	local := filepath.Join(t.TempDir(), "big")
	writeFile(t, local, []byte(strings.Repeat("a", 1500)+strings.Repeat("b", 1500)), 0o600)
	ref, err := stage.Upload(e.ctx, e.store, local, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := "parts/sha256/" + strings.TrimPrefix(ref.Digest, "sha256:")
	rc, err := e.store.Get(e.ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	list, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := stage.CheckPartList(e.ctx, e.store, ref.Digest, list); err != nil {
		t.Errorf("the uploaded part list: %v", err)
	}
	other := "sha256:" + strings.Repeat("cd", 32)
	if err := stage.CheckPartList(e.ctx, e.store, other, list); !errors.Is(err, stage.ErrCorrupt) {
		t.Errorf("the part list under another file's digest: %v, want ErrCorrupt", err)
	}
	if err := stage.CheckPartList(e.ctx, e.store, ref.Digest, []byte(`{"version":1}`)); !errors.Is(err, stage.ErrBadManifest) {
		t.Errorf("an empty part list: %v, want ErrBadManifest", err)
	}
}
