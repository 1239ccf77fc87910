package stage

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestHashCacheTrustsOnlyWhatDidNotChange: a file hashed long after it was
// written is remembered and found again while it is as it was; rewritten
// in place (same size, its modification time put back), its change time
// gives it away; one written just before it was hashed is not trusted.
func TestHashCacheTrustsOnlyWhatDidNotChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if err := os.WriteFile(path, []byte("step 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	// The change time is now: wait it out of the racy window by hashing
	// "later" instead.
	later := time.Now().Add(2 * racyWindow)
	c := NewHashCache()
	hash := func() hashed {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		h, err := hashFile(context.Background(), f, PartSize, noProgress{})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	lookup := func() (hashed, bool) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return c.lookup("state", f)
	}
	remember := func(h hashed, at time.Time) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		c.remember("state", f, h, at)
	}

	h := hash()
	remember(h, later)
	if got, ok := lookup(); !ok || got.digest != h.digest {
		t.Fatalf("an unchanged file is not found: %v %v", got, ok)
	}
	// Rewritten in place, same size, its modification time put back: as
	// often as it takes the change time, which the file system keeps at
	// the kernel's clock tick, to move on from the one remembered.
	ctime := func() syscall.Timespec {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ctim
	}
	before, deadline := ctime(), time.Now().Add(5*time.Second)
	for ctime() == before {
		if time.Now().After(deadline) {
			t.Fatal("the file's change time never moved on")
		}
		if err := os.WriteFile(path, []byte("step 2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := lookup(); ok {
		t.Fatal("a file rewritten in place is taken for the one hashed before")
	}
	// Hashed right after it changed: not remembered.
	remember(hash(), time.Now())
	if _, ok := lookup(); ok {
		t.Fatal("a file hashed within a moment of its change is trusted")
	}
}
