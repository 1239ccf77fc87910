package stage_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/stage"
)

// env is one test's server, bucket and store.
type env struct {
	js     jetstream.JetStream
	bucket jetstream.ObjectStore
	store  stage.Store
	ctx    context.Context
}

func newEnv(tb testing.TB, opts ...stage.ObjectStoreOption) *env {
	tb.Helper()
	srv := natstest.Start(tb)
	js := srv.JetStream(tb)
	ctx := natstest.Context(tb, 10*time.Minute)
	bucket, err := js.ObjectStore(ctx, events.DataBucket)
	if err != nil {
		tb.Fatal(err)
	}
	return &env{js: js, bucket: bucket, store: stage.NewObjectStore(bucket, append(opts, stage.WithPullReads(js))...), ctx: ctx}
}

// objects lists the names in the bucket.
func (e *env) objects(tb testing.TB) []string {
	tb.Helper()
	infos, err := e.bucket.List(e.ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.Name)
	}
	sort.Strings(names)
	return names
}

// streamState is the bucket's stream: messages and bytes, chunks and
// metadata together, so that stray chunks of an aborted upload show too.
func (e *env) streamState(tb testing.TB) jetstream.StreamState {
	tb.Helper()
	st, err := e.js.Stream(e.ctx, "OBJ_"+events.DataBucket)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := st.Info(e.ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return info.State
}

// chunkSubject is where the chunks of the object name are.
func (e *env) chunkSubject(tb testing.TB, name string) string {
	tb.Helper()
	info, err := e.bucket.GetInfo(e.ctx, name)
	if err != nil {
		tb.Fatal(err)
	}
	return "$O." + events.DataBucket + ".C." + info.NUID
}

func (e *env) stream(tb testing.TB) jetstream.Stream {
	tb.Helper()
	st, err := e.js.Stream(e.ctx, "OBJ_"+events.DataBucket)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// countingStore counts what goes through to the real store. It is a
// decorator, not a fake: every call reaches JetStream.
type countingStore struct {
	stage.Store
	puts  atomic.Int64
	bytes atomic.Int64
	gets  atomic.Int64
}

func (c *countingStore) Put(ctx context.Context, name, digest string, size int64, r io.Reader) error {
	c.puts.Add(1)
	c.bytes.Add(size)
	return c.Store.Put(ctx, name, digest, size, r)
}

func (c *countingStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, name)
}

// blobOf is the object name of content b.
func blobOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "blob/sha256/" + hex.EncodeToString(sum[:])
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
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

func writeFile(tb testing.TB, path string, data []byte, mode fs.FileMode) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		tb.Fatal(err)
	}
}

// tree describes a folder: each file's content and mode, and each empty
// directory (mode fs.ModeDir).
type tree map[string]entry

type entry struct {
	data []byte
	mode fs.FileMode
}

// readTree reads a folder into a tree, with permission bits.
func readTree(tb testing.TB, root string) tree {
	tb.Helper()
	t := tree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			t[rel] = entry{mode: fs.ModeDir | fi.Mode().Perm()}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		t[rel] = entry{data: b, mode: fi.Mode().Perm()}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func sameTree(tb testing.TB, want, got tree) {
	tb.Helper()
	for p, w := range want {
		g, ok := got[p]
		if !ok {
			tb.Errorf("%s missing", p)
			continue
		}
		if w.mode != g.mode {
			tb.Errorf("%s: mode %v, want %v", p, g.mode, w.mode)
		}
		if !bytes.Equal(w.data, g.data) {
			tb.Errorf("%s: %d bytes differ from the %d written", p, len(g.data), len(w.data))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			tb.Errorf("%s is extra", p)
		}
	}
}

// cancelAfter is a Progress that cancels an upload once n bytes were sent.
type cancelAfter struct {
	mu     sync.Mutex
	upload bool
	sent   int64
	n      int64
	cancel context.CancelFunc
}

func (c *cancelAfter) Start(_ int64, label string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.upload = strings.HasPrefix(label, "upload")
}

func (c *cancelAfter) Add(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.upload {
		return
	}
	c.sent += n
	if c.sent >= c.n {
		c.cancel()
	}
}

func (c *cancelAfter) Done() {}

// recorder is a Progress that remembers its phases and totals.
type recorder struct {
	mu     sync.Mutex
	phases []string
	totals []int64
	added  []int64
}

func (r *recorder) Start(total int64, label string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phases = append(r.phases, label)
	r.totals = append(r.totals, total)
	r.added = append(r.added, 0)
}

func (r *recorder) Add(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.added[len(r.added)-1] += n
}

func (r *recorder) Done() {}

// setPartSize shrinks stage.PartSize for one test. Such tests do not call
// t.Parallel: they run before every parallel test starts.
func setPartSize(tb testing.TB, n int64) {
	tb.Helper()
	old := stage.PartSize
	stage.PartSize = n
	tb.Cleanup(func() { stage.PartSize = old })
}
