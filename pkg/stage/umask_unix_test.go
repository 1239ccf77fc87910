//go:build unix

package stage_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/e31net/e31/pkg/stage"
)

// A job runs as another user and must read its data whatever the umask of
// the node agent that downloaded it. The umask is process-wide, so this test
// does not run in parallel with others.
func TestDownloadModesIgnoreUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(old) })
	e := newEnv(t)
	src := filepath.Join(t.TempDir(), "clips")
	want := makeFolder(t, src)
	ref, err := stage.Upload(e.ctx, e.store, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "data", "clips")
	if err := stage.Download(e.ctx, e.store, ref, dest, nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, want, readTree(t, dest))
}
