package stage_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// The ways an object is damaged below this package: through the object
// store API, and by writing to its stream directly.
var tampers = []struct {
	name string
	do   func(t *testing.T, e *env, object string)
}{
	{"different bytes under the same name", func(t *testing.T, e *env, object string) {
		info, err := e.bucket.GetInfo(e.ctx, object)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.bucket.PutBytes(e.ctx, object, bytes.Repeat([]byte("x"), int(info.Size))); err != nil {
			t.Fatal(err)
		}
	}},
	{"chunk overwritten", func(t *testing.T, e *env, object string) {
		// The last chunk is replaced by one of the same length: the object's
		// metadata, size and chunk count all still look right.
		subj := e.chunkSubject(t, object)
		st := e.stream(t)
		last, err := st.GetLastMsgForSubject(e.ctx, subj)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteMsg(e.ctx, last.Sequence); err != nil {
			t.Fatal(err)
		}
		forged := bytes.Repeat([]byte("y"), len(last.Data))
		if _, err := e.js.Publish(e.ctx, subj, forged); err != nil {
			t.Fatal(err)
		}
	}},
	{"chunk appended", func(t *testing.T, e *env, object string) {
		if _, err := e.js.Publish(e.ctx, e.chunkSubject(t, object), []byte("extra")); err != nil {
			t.Fatal(err)
		}
	}},
	{"truncated", func(t *testing.T, e *env, object string) {
		st := e.stream(t)
		last, err := st.GetLastMsgForSubject(e.ctx, e.chunkSubject(t, object))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteMsg(e.ctx, last.Sequence); err != nil {
			t.Fatal(err)
		}
	}},
}

func TestDownloadDetectsTampering(t *testing.T) {
	t.Parallel()
	for _, tc := range tampers {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			src := filepath.Join(t.TempDir(), "clips")
			makeFolder(t, src)
			ref, err := stage.Upload(e.ctx, e.store, src, nil)
			if err != nil {
				t.Fatal(err)
			}
			ref.Name = "clips"
			tc.do(t, e, blobOf(randomBytes(2, 200_000))) // sub/b.bin

			parent := t.TempDir()
			err = stage.Download(e.ctx, e.store, ref, filepath.Join(parent, "clips"), nil)
			if !errors.Is(err, stage.ErrCorrupt) || !strings.Contains(err.Error(), "sub/b.bin") {
				t.Fatalf("download = %v, want ErrCorrupt naming sub/b.bin", err)
			}
			if left, _ := os.ReadDir(parent); len(left) != 0 {
				t.Errorf("a failed download left %v", left)
			}
		})
	}
}

func TestFetchDetectsTampering(t *testing.T) {
	t.Parallel()
	for _, tc := range tampers {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			out := t.TempDir()
			good, bad := []byte("fine"), randomBytes(4, 300_000)
			writeFile(t, filepath.Join(out, "good.txt"), good, 0o644)
			writeFile(t, filepath.Join(out, "res", "bad.bin"), bad, 0o644)
			c, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "**"}}, 0)
			if err != nil {
				t.Fatal(err)
			}
			tc.do(t, e, blobOf(bad))

			dest := t.TempDir()
			err = stage.Fetch(e.ctx, e.store, c.Files, dest, nil)
			if !errors.Is(err, stage.ErrCorrupt) || !strings.Contains(err.Error(), "res/bad.bin") {
				t.Fatalf("fetch = %v, want ErrCorrupt naming res/bad.bin", err)
			}
			if _, err := os.Stat(filepath.Join(dest, "res", "bad.bin")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the bad file is in place: %v", err)
			}
			if tmp, _ := filepath.Glob(filepath.Join(dest, "res", ".e31-*")); len(tmp) > 0 {
				t.Errorf("temporary files left: %v", tmp)
			}
		})
	}
}

func TestFetchDetectsMissingObject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	files := []events.OutputFile{{Path: "gone.txt", Bytes: 4, Digest: digestOf([]byte("gone"))}}
	err := stage.Fetch(e.ctx, e.store, files, t.TempDir(), nil)
	if !errors.Is(err, stage.ErrNotFound) || !strings.Contains(err.Error(), "gone.txt") {
		t.Fatalf("fetch = %v, want ErrNotFound naming gone.txt", err)
	}
}

// An object whose chunks are gone altogether: the direct gets that read it
// find no chunk, and say so at once, long before the transfer deadline.
// (nats.go's push consumer never ended on the wire: only the deadline
// noticed.)
func TestDownloadNoticesVanishedChunks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stage.WithGetTimeout(200*time.Millisecond, 1<<30))
	file := filepath.Join(t.TempDir(), "f")
	data := randomBytes(5, 100_000)
	writeFile(t, file, data, 0o644)
	ref, err := stage.Upload(e.ctx, e.store, file, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref.Name = "f"
	if err := e.stream(t).Purge(e.ctx, jetstream.WithPurgeSubject(e.chunkSubject(t, blobOf(data)))); err != nil {
		t.Fatal(err)
	}
	err = stage.Download(e.ctx, e.store, ref, filepath.Join(t.TempDir(), "f"), nil)
	if !errors.Is(err, stage.ErrCorrupt) {
		t.Fatalf("download = %v, want ErrCorrupt", err)
	}
}
