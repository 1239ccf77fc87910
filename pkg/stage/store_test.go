package stage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/e31net/e31/pkg/stage"
)

// testStore checks the Store contract. It takes only a Store, so that
// another implementation (S3) can run it as it is.
func testStore(t *testing.T, s stage.Store) {
	ctx := context.Background()
	data := randomBytes(40, 300_000)
	name := blobOf(data)
	put := func(name, digest string, size int64, r io.Reader) error {
		return s.Put(ctx, name, digest, size, r)
	}

	if _, err := s.Stat(ctx, name); !errors.Is(err, stage.ErrNotFound) {
		t.Fatalf("stat before put = %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, name); !errors.Is(err, stage.ErrNotFound) {
		t.Fatalf("get before put = %v, want ErrNotFound", err)
	}

	// Refused puts store nothing.
	refused := []struct {
		why  string
		r    io.Reader
		size int64
		want error
	}{
		{"other bytes", bytes.NewReader(randomBytes(41, len(data))), int64(len(data)), stage.ErrChanged},
		{"fewer bytes", bytes.NewReader(data[:1000]), int64(len(data)), stage.ErrChanged},
		{"more bytes", io.MultiReader(bytes.NewReader(data), strings.NewReader("x")), int64(len(data)), stage.ErrChanged},
		{"failing reader", io.MultiReader(bytes.NewReader(data[:200_000]), iotest.ErrReader(io.ErrUnexpectedEOF)), int64(len(data)), io.ErrUnexpectedEOF},
	}
	for _, tc := range refused {
		if err := put(name, digestOf(data), tc.size, tc.r); !errors.Is(err, tc.want) {
			t.Errorf("put with %s = %v, want %v", tc.why, err, tc.want)
		}
		if _, err := s.Stat(ctx, name); !errors.Is(err, stage.ErrNotFound) {
			t.Errorf("after a put with %s, stat = %v, want ErrNotFound", tc.why, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Put(cancelled, name, digestOf(data), int64(len(data)), bytes.NewReader(data)); !errors.Is(err, context.Canceled) {
		t.Errorf("put with a cancelled context = %v", err)
	}

	if err := put(name, digestOf(data), int64(len(data)), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	info, err := s.Stat(ctx, name)
	if err != nil || info != (stage.Info{Size: int64(len(data)), Digest: digestOf(data)}) {
		t.Fatalf("stat = %+v, %v", info, err)
	}
	// A refused put leaves the object as it was.
	if err := put(name, digestOf(data), int64(len(data)), bytes.NewReader(make([]byte, len(data)))); !errors.Is(err, stage.ErrChanged) {
		t.Fatalf("put of other bytes = %v", err)
	}
	rc, err := s.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get = %d bytes, %v", len(got), err)
	}

	// Empty objects are objects.
	if err := put("empty", digestOf(nil), 0, strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat(ctx, "empty"); err != nil || info.Size != 0 || info.Digest != digestOf(nil) {
		t.Fatalf("stat empty = %+v, %v", info, err)
	}

	if err := s.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, name); err != nil {
		t.Fatalf("second delete = %v", err)
	}
	if _, err := s.Stat(ctx, name); !errors.Is(err, stage.ErrNotFound) {
		t.Fatalf("stat after delete = %v", err)
	}
}

func TestObjectStoreContract(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	testStore(t, e.store)
	// Nothing a refused put sent stays behind.
	assertNoStrayChunks(t, e)
}
