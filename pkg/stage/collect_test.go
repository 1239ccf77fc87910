package stage_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"count.txt", "count.txt", true},
		{"count.txt", "sub/count.txt", false},
		{"*.txt", "count.txt", true},
		{"*.txt", "sub/count.txt", false}, // '*' does not cross '/'
		{"*/*.txt", "sub/count.txt", true},
		{"**", "a", true},
		{"**", "a/b/c", true},
		{"**/*.csv", "a.csv", true}, // "**" matches no element too
		{"**/*.csv", "x/y/a.csv", true},
		{"**/*.csv", "x/y/a.txt", false},
		{"logs/**", "logs/a/b.log", true},
		{"logs/**", "logs", true},
		{"logs/**", "other/a.log", false},
		{"a/**/z", "a/z", true},
		{"a/**/z", "a/b/c/z", true},
		{"a/**/z", "a/b/c/y", false},
		{"a**b", "axxb", true}, // "**" inside an element is '*'
		{"a**b", "ax/xb", false},
		{"res?/[ab].csv", "res1/a.csv", true},
		{"res?/[ab].csv", "res1/c.csv", false},
		{"[", "[", false}, // malformed matches nothing
		{"**/**/**/**/**/**/**/**/x", strings.Repeat("d/", 40) + "y", false},
	}
	for _, tc := range tests {
		if got := stage.Match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestCheckPattern(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"count.txt", "results/", "**/*.csv", "a/b/[0-9]*.log", "**"} {
		if err := stage.CheckPattern(ok); err != nil {
			t.Errorf("CheckPattern(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/../../x", "/out/count.txt", "a//b", "./a", "a/./b", "[", "a\x00b"} {
		if err := stage.CheckPattern(bad); err == nil {
			t.Errorf("CheckPattern(%q) = nil, want an error", bad)
		}
	}
}

// jobOutput writes what a hostile job might leave in /out.
func jobOutput(t *testing.T) (out, secret string) {
	t.Helper()
	outside := t.TempDir()
	secret = filepath.Join(outside, "passwd")
	writeFile(t, secret, []byte("root:x:0:0"), 0o644)
	out = filepath.Join(t.TempDir(), "out")
	writeFile(t, filepath.Join(out, "count.txt"), []byte("42\n"), 0o644)
	writeFile(t, filepath.Join(out, "results", "a.csv"), []byte("a,b\n"), 0o644)
	writeFile(t, filepath.Join(out, "results", "sub", "b.csv"), []byte("c,d\n"), 0o644)
	writeFile(t, filepath.Join(out, "results", "notes.txt"), []byte("n"), 0o644)
	writeFile(t, filepath.Join(out, "logs", "run.log"), []byte("log"), 0o644)
	for link, target := range map[string]string{
		"link":          secret, // absolute, outside
		"rel-link":      "../../" + filepath.Base(outside) + "/passwd",
		"dirlink":       outside,                    // a folder outside
		"inside-link":   "count.txt",                // inside, still not followed
		"results/c.csv": secret,                     // a link among matches
		"logs/escape":   "../../../../../../../etc", // a folder far outside
	} {
		if err := os.Symlink(target, filepath.Join(out, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return out, secret
}

func TestCollect(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out, _ := jobOutput(t)
	decls := []events.OutputDecl{
		{Path: "count.txt", Required: true},
		{Path: "results/**/*.csv"},
		{Path: "logs/"}, // a folder: everything in it
		{Path: "*.missing"},
		{Path: "link"},
		{Path: "dirlink/passwd"},
		{Path: "inside-link"},
		{Path: "fifo"},
		{Path: "../outside/passwd"},
		{Path: "/etc/passwd"},
		{Path: "count.txt"}, // twice is once
	}
	c, err := stage.Collect(e.ctx, e.store, out, decls, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := []events.OutputFile{
		{Path: "count.txt", Bytes: 3, Digest: digestOf([]byte("42\n")), Mode: "0644"},
		{Path: "logs/run.log", Bytes: 3, Digest: digestOf([]byte("log")), Mode: "0644"},
		{Path: "results/a.csv", Bytes: 4, Digest: digestOf([]byte("a,b\n")), Mode: "0644"},
		{Path: "results/sub/b.csv", Bytes: 4, Digest: digestOf([]byte("c,d\n")), Mode: "0644"},
	}
	if !reflect.DeepEqual(c.Files, want) {
		t.Errorf("files = %+v, want %+v", c.Files, want)
	}
	wantMissing := []string{"*.missing", "link", "dirlink/passwd", "inside-link", "fifo", "../outside/passwd", "/etc/passwd"}
	if !reflect.DeepEqual(c.Missing, wantMissing) {
		t.Errorf("missing = %q, want %q", c.Missing, wantMissing)
	}
	if c.Bytes != 14 {
		t.Errorf("bytes = %d, want 14", c.Bytes)
	}

	// Everything collected comes back, and nothing else was stored.
	dest := t.TempDir()
	if err := stage.Fetch(e.ctx, e.store, c.Files, dest, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range want {
		b, err := os.ReadFile(filepath.Join(dest, filepath.FromSlash(f.Path)))
		if err != nil || digestOf(b) != f.Digest {
			t.Errorf("%s: %v, digest %s", f.Path, err, digestOf(b))
		}
	}
	// Four files and the manifest that lists them.
	if n := len(e.objects(t)); n != 5 {
		t.Errorf("%d objects stored, want 5: %v", n, e.objects(t))
	}
	if c.Manifest == "" || c.Count != 0 {
		t.Errorf("manifest %q, count %d; want a manifest and every file listed", c.Manifest, c.Count)
	}
	listed, err := stage.ManifestFiles(e.ctx, e.store, c.Manifest)
	if err != nil || !reflect.DeepEqual(listed, want) {
		t.Errorf("manifest lists %+v (%v), want %+v", listed, err, want)
	}
	assertNoStrayChunks(t, e)
}

func TestCollectEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out, _ := jobOutput(t)
	c, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "**"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range c.Files {
		paths = append(paths, f.Path)
	}
	want := []string{"count.txt", "logs/run.log", "results/a.csv", "results/notes.txt", "results/sub/b.csv"}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("collected %q, want %q (no links, no pipe)", paths, want)
	}
	if len(c.Missing) != 0 {
		t.Errorf("missing = %q", c.Missing)
	}
}

func TestCollectTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := t.TempDir()
	writeFile(t, filepath.Join(out, "a"), make([]byte, 600), 0o644)
	writeFile(t, filepath.Join(out, "b"), make([]byte, 600), 0o644)
	c, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "*"}}, 1000)
	if !errors.Is(err, stage.ErrOutputTooLarge) {
		t.Fatalf("collect = %v, want ErrOutputTooLarge", err)
	}
	if !strings.Contains(err.Error(), "1200") || !strings.Contains(err.Error(), "1000") {
		t.Errorf("error %q does not say how large and what limit", err)
	}
	if c.Bytes != 1200 || len(c.Files) != 2 {
		t.Errorf("collected %+v, want what matched listed", c)
	}
	if objs := e.objects(t); len(objs) != 0 {
		t.Errorf("stored %v although the output was refused", objs)
	}
	// Exactly the limit is fine.
	if _, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "*"}}, 1200); err != nil {
		t.Fatal(err)
	}
}

func TestCollectDoesNotWalkThroughLinks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := t.TempDir()
	// The declarations name files behind a link to the root folder.
	if err := os.Symlink("/", filepath.Join(out, "root")); err != nil {
		t.Fatal(err)
	}
	c, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "root/etc/passwd"}, {Path: "root/**"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files) != 0 || len(c.Missing) != 2 {
		t.Fatalf("collected %+v through a link", c)
	}
}

func TestCollectStoresEachContentOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := t.TempDir()
	same := randomBytes(30, 200_000)
	for i := range 50 {
		writeFile(t, filepath.Join(out, fmt.Sprintf("copy%02d", i)), same, 0o644)
	}
	c, err := stage.Collect(e.ctx, e.store, out, []events.OutputDecl{{Path: "copy*"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files) != 50 || c.Bytes != 50*200_000 {
		t.Fatalf("collected %d files, %d bytes", len(c.Files), c.Bytes)
	}
	if objs := e.objects(t); len(objs) != 2 {
		t.Errorf("objects %v, want the content once and the manifest", objs)
	}
	assertNoStrayChunks(t, e)
}
