// Package stagetest checks implementations of stage.Store, as
// testing/fstest checks file systems: one contract, run against every store.
package stagetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/e31net/e31/pkg/stage"
)

// TestStore checks that s keeps the stage.Store contract: puts are all or
// nothing and checked against the digest and size they promise, a refused
// put leaves the name as it was, stat and get report what was put, empty
// objects are objects, and deleting is idempotent. s must be empty of the
// names it uses (blob/sha256/<hex> of its own random content, and "empty").
// Every implementation runs it: the JetStream object store in pkg/stage's
// tests, and any other (an S3-compatible one) in its own.
func TestStore(t *testing.T, s stage.Store) {
	t.Helper()
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

// randomBytes is n reproducible pseudo-random bytes.
func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// blobOf is the object name pkg/stage gives content b.
func blobOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "blob/sha256/" + hex.EncodeToString(sum[:])
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
