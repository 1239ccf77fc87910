package stage_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/stage"
)

// TestADataBucketHoldsNoMoreThanMaxData: the bucket made for a submitter
// is bounded by its max-data; staging past it fails with ErrFull, and what
// was stored before is still there, intact.
func TestADataBucketHoldsNoMoreThanMaxData(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv, err := limits.Setup(e.ctx, e.js, 1)
	if err != nil {
		t.Fatal(err)
	}
	const max = 1 << 20
	if _, err := limits.Change(e.ctx, kv, limits.Key("alice"), func(p *limits.Policy) { p.MaxDataBytes = ptr(int64(max)) }); err != nil {
		t.Fatal(err)
	}
	obs, err := stage.OpenBucket(e.ctx, e.js, "alice")
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.js.Stream(e.ctx, "OBJ_"+events.DataBucketFor("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != max {
		t.Fatalf("the bucket's MaxBytes is %d, want alice's max-data %d", got, max)
	}
	store := stage.NewObjectStore(obs)
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
	firstData := randomBytes(1, 600<<10)
	writeFile(t, first, firstData, 0o644)
	writeFile(t, second, randomBytes(2, 600<<10), 0o644)
	ref, err := stage.Upload(e.ctx, store, first, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = stage.Upload(e.ctx, store, second, nil)
	if !errors.Is(err, stage.ErrFull) {
		t.Fatalf("staging past max-data: err = %v, want ErrFull", err)
	}
	t.Logf("the error: %v", err)
	out := filepath.Join(t.TempDir(), "out")
	if err := stage.Download(e.ctx, store, ref, out, nil); err != nil {
		t.Fatalf("the data staged before is gone: %v", err)
	}
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, firstData) {
		t.Fatalf("the data staged before changed (%v)", err)
	}
}

func ptr[T any](v T) *T { return &v }
