package stage_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// TestOutputKeepsTheExecBit collects a script and a data file, and checks
// that the script comes back executable every way output comes back: fetched
// by list, fetched by manifest, and staged for a later job.
func TestOutputKeepsTheExecBit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := t.TempDir()
	script := []byte("#!/bin/sh\necho hi\n")
	writeFile(t, filepath.Join(out, "bin", "run.sh"), script, 0o755)
	writeFile(t, filepath.Join(out, "data.csv"), []byte("a,b\n"), 0o600)
	c, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "**"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []events.OutputFile{
		{Path: "bin/run.sh", Bytes: int64(len(script)), Digest: digestOf(script), Mode: "0755"},
		{Path: "data.csv", Bytes: 4, Digest: digestOf([]byte("a,b\n")), Mode: "0644"},
	}
	if !reflect.DeepEqual(c.Files, want) {
		t.Fatalf("collected %+v, want %+v", c.Files, want)
	}

	byList, byManifest := t.TempDir(), t.TempDir()
	if err := stage.Fetch(e.ctx, e.store, c.Files, byList, nil); err != nil {
		t.Fatal(err)
	}
	if err := stage.FetchDir(e.ctx, e.store, c.Manifest, byManifest, nil); err != nil {
		t.Fatal(err)
	}
	wantTree := tree{
		"bin":        {mode: fs.ModeDir | 0o755},
		"bin/run.sh": {data: script, mode: 0o755},
		"data.csv":   {data: []byte("a,b\n"), mode: 0o644},
	}
	// Fetched files belong to whoever fetched them: their umask applies,
	// but the execute bit is kept.
	for _, dir := range []string{byList, byManifest} {
		for _, f := range want {
			fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Path)))
			if err != nil {
				t.Fatal(err)
			}
			if exec := fi.Mode()&0o100 != 0; exec != (f.Mode == "0755") {
				t.Errorf("%s: fetched with mode %v, want %s", f.Path, fi.Mode(), f.Mode)
			}
		}
	}

	// A later job sees the same folder at /data/<name>.
	for name, mk := range map[string]func() (events.DataRef, error){
		"manifest": func() (events.DataRef, error) { return stage.OutputRef(e.ctx, e.store, c.Manifest, c.Files) },
		"list":     func() (events.DataRef, error) { return stage.OutputRef(e.ctx, e.store, "", c.Files) },
	} {
		ref, err := mk()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ref.Kind != stage.KindDir || ref.Files != 2 || ref.Bytes != c.Bytes {
			t.Errorf("%s: ref %+v", name, ref)
		}
		dest := filepath.Join(t.TempDir(), "in")
		if err := stage.Download(e.ctx, e.store, ref, dest, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := readTree(t, dest)
		delete(got, ".")
		sameTree(t, wantTree, got)
	}
}

// TestCollectManyFilesListsTheFirst collects more files than one event may
// list: the result lists the first of them and counts them all, it fits in
// an event, and its manifest brings every file back.
func TestCollectManyFilesListsTheFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := t.TempDir()
	const n = 2500
	for i := range n {
		writeFile(t, filepath.Join(out, "parts", fmt.Sprintf("p%04d.txt", i)), []byte(fmt.Sprintf("part %d\n", i)), 0o644)
	}
	c, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "parts/"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files) < 500 || len(c.Files) > events.MaxListedFiles || c.Count != n || c.FileCount() != n {
		t.Fatalf("listed %d, count %d; want 500 to %d listed of %d", len(c.Files), c.Count, events.MaxListedFiles, n)
	}
	if c.Files[0].Path != "parts/p0000.txt" {
		t.Errorf("first listed %s, want the first by path", c.Files[0].Path)
	}
	body, err := json.Marshal(events.RunStopped{Outcome: events.Succeeded, Output: c})
	if err != nil || len(body) > events.MaxBodyBytes/2 {
		t.Errorf("the stop would be %d bytes (%v); an event is at most %d", len(body), err, events.MaxBodyBytes)
	}
	all, err := stage.ManifestFiles(e.ctx, e.store, c.Manifest)
	if err != nil || len(all) != n || !reflect.DeepEqual(all[:len(c.Files)], c.Files) {
		t.Fatalf("manifest: %d files (%v), want %d beginning with the listed ones", len(all), err, n)
	}
	dest := t.TempDir()
	if err := stage.FetchDir(e.ctx, e.store, c.Manifest, dest, nil); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 999, 1000, n - 1} {
		b, err := os.ReadFile(filepath.Join(dest, "parts", fmt.Sprintf("p%04d.txt", i)))
		if err != nil || string(b) != fmt.Sprintf("part %d\n", i) {
			t.Errorf("file %d: %q, %v", i, b, err)
		}
	}
}

// TestListedBoundsTheBytes checks that long paths list fewer files: the
// bound is on the event's size, not only on the count.
func TestListedBoundsTheBytes(t *testing.T) {
	t.Parallel()
	long := make([]events.OutputFile, 200)
	for i := range long {
		long[i] = events.OutputFile{Path: fmt.Sprintf("%03d/", i) + strings.Repeat("x", 4000),
			Bytes: 1, Digest: digestOf([]byte{byte(i)}), Mode: "0644"}
	}
	l := events.Listed(long)
	if len(l) == 0 || len(l) >= len(long) {
		t.Fatalf("listed %d of %d files of 4 KB paths", len(l), len(long))
	}
	body, _ := json.Marshal(l)
	if len(body) > 96<<10 {
		t.Errorf("the listed files take %d bytes", len(body))
	}
	// Quotes and control characters take more room escaped; still bounded.
	odd := make([]events.OutputFile, 2000)
	for i := range odd {
		odd[i] = events.OutputFile{Path: fmt.Sprintf("%04d", i) + strings.Repeat("\x01<\"", 300), Bytes: 1, Digest: digestOf(nil)}
	}
	body, _ = json.Marshal(events.Listed(odd))
	if len(body) > 96<<10 {
		t.Errorf("the listed files take %d bytes", len(body))
	}
}

// TestExpanderNamesWhatDataIsStoredIn checks the objects listed for a small
// file, a folder and data that was never stored.
func TestExpanderNamesWhatDataIsStoredIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	a, b := []byte("alpha"), []byte("beta")
	writeFile(t, filepath.Join(dir, "a"), a, 0o644)
	writeFile(t, filepath.Join(dir, "sub", "b"), b, 0o644)
	writeFile(t, filepath.Join(dir, "sub", "a-again"), a, 0o644)
	ref, err := stage.Upload(e.ctx, e.store, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	x := stage.NewExpander(e.store)
	names, complete, err := x.Objects(e.ctx, stage.KindDir, ref.Digest)
	if err != nil || !complete {
		t.Fatalf("objects: %v, complete %v", err, complete)
	}
	manifest := "blob/sha256/" + ref.Digest[len("sha256:"):]
	want := []string{blobOf(a), blobOf(b), manifest, partsOf(a), partsOf(b)}
	slices.Sort(want)
	if !reflect.DeepEqual(names, want) {
		t.Errorf("objects %q, want %q", names, want)
	}
	// Every object stored is named: deleting them all leaves nothing.
	for _, o := range e.objects(t) {
		if !slices.Contains(names, o) {
			t.Errorf("%s is stored but not named", o)
		}
	}

	never := digestOf([]byte("never stored"))
	names, complete, err = x.Objects(e.ctx, stage.KindFile, never)
	if err != nil || complete || len(names) != 2 {
		t.Errorf("never stored: %q, complete %v, %v; want its two names, incomplete", names, complete, err)
	}
	if _, _, err := x.Objects(e.ctx, "link", never); !errors.Is(err, stage.ErrBadRef) {
		t.Errorf("kind link: %v, want ErrBadRef", err)
	}

	if err := stage.DeleteObjects(e.ctx, e.store, names); err != nil {
		t.Fatal(err)
	}
	if err := stage.DeleteObjects(e.ctx, e.store, []string{manifest, blobOf(a), blobOf(b)}); err != nil {
		t.Fatal(err)
	}
	if objs := e.objects(t); len(objs) != 0 {
		t.Errorf("left %v", objs)
	}
	// Deleting twice is harmless; and once forgotten, the folder is seen gone.
	if err := stage.DeleteObjects(e.ctx, e.store, []string{manifest}); err != nil {
		t.Fatal(err)
	}
	x.Forget([]string{blobOf(a)})
	if _, complete, err := x.Objects(e.ctx, stage.KindFile, digestOf(a)); err != nil || complete {
		t.Errorf("a deleted file: complete %v, %v", complete, err)
	}
}

// partsOf is the name of the part list of content b.
func partsOf(b []byte) string { return "parts" + blobOf(b)[len("blob"):] }
