package stage_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// FetchMissing fetches only what is not in place: a second fetch into the
// same folder reads nothing from the store, and after a file went missing,
// another changed and a third was truncated, it fetches those three alone.
func TestFetchMissingFetchesOnlyWhatIsNotInPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := t.TempDir()
	for i, name := range []string{"a.txt", "b/c.bin", "b/d.bin", "e.txt"} {
		writeFile(t, filepath.Join(out, name), randomBytes(uint64(i), 1000*(i+1)), 0o644)
	}
	c, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "**"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: e.store}
	dest := filepath.Join(t.TempDir(), "7")

	got, err := stage.FetchMissing(e.ctx, cs, c.Files, dest, nil)
	if err != nil || got.Files != 4 || got.Kept != 0 || got.Bytes != c.Bytes {
		t.Fatalf("first fetch: %+v, %v; want all 4 files, %d bytes", got, err, c.Bytes)
	}
	firstGets := cs.gets.Load()
	got, err = stage.FetchMissing(e.ctx, cs, c.Files, dest, nil)
	if err != nil || got.Files != 0 || got.Kept != 4 || cs.gets.Load() != firstGets {
		t.Fatalf("second fetch: %+v, %v, %d gets more; want nothing fetched", got, err, cs.gets.Load()-firstGets)
	}

	if err := os.Remove(filepath.Join(dest, "a.txt")); err != nil {
		t.Fatal(err)
	}
	b := randomBytes(1, 2000)
	b[7] ^= 1 // the same size, another digest
	writeFile(t, filepath.Join(dest, "b/c.bin"), b, 0o644)
	if err := os.Truncate(filepath.Join(dest, "b/d.bin"), 10); err != nil {
		t.Fatal(err)
	}
	got, err = stage.FetchMissing(e.ctx, cs, c.Files, dest, nil)
	if err != nil || got.Files != 3 || got.Kept != 1 || got.Bytes != 1000+2000+3000 {
		t.Fatalf("after three files went wrong: %+v, %v; want those three fetched", got, err)
	}
	for i, name := range []string{"a.txt", "b/c.bin", "b/d.bin", "e.txt"} {
		data, err := os.ReadFile(filepath.Join(dest, name))
		if err != nil || digestOf(data) != digestOf(randomBytes(uint64(i), 1000*(i+1))) {
			t.Errorf("%s after the fetch: %v, not its bytes", name, err)
		}
	}
}
