package stage

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/e31net/e31/pkg/events"
)

// Collect gathers a job's declared output from outDir and stores it. Each
// declaration is matched against every path under outDir (see Match); every
// regular file it matches is uploaded, and so is every regular file under a
// directory it matches. The result lists the files (path relative to outDir,
// with slashes, sorted), their total size, and in Missing the declarations,
// in their order, that matched no file; whether a missing Required one fails
// the job is for the caller to say.
//
// outDir is the job's, so nothing in it is trusted. Symlinks are never
// followed, even ones that point inside outDir (declare the target instead),
// and anything that is not a regular file or a directory is skipped: a
// declaration that matches only such things is missing. Files are read
// through an os.Root, so nothing outside outDir is ever read, whatever the
// job left behind. A declaration that is not a valid pattern (see
// CheckPattern) matches nothing. One thing an os.Root cannot tell is a hard
// link: a job may link a file from elsewhere on the same file system into
// outDir (Linux's fs.protected_hardlinks allows that only for files it owns
// or may write), and Collect, running as a more privileged user, would
// return it. So outDir should be on a file system of its own (a per-job
// tmpfs or volume). Two files with the same content are stored once.
//
// Last, Collect stores a folder manifest of every file it collected (with
// its mode: whether it is executable) and names it in Manifest, so that the
// output can be fetched, or staged for a later job, as one folder. Files
// lists the first of them only, as events.Listed says, so that the result
// fits in an event however many files there are; Count then says how many.
//
// maxBytes bounds the total (0 or less means no bound). Output larger than
// that fails with an error wrapping ErrOutputTooLarge before anything is
// uploaded, and the Collected returned still lists (the first of) what
// matched, without digests, and its total in Bytes, so that the caller can
// say what was too large.
func Collect(ctx context.Context, s Store, outDir string, decls []events.OutputDecl, maxBytes int64) (events.Collected, error) {
	c, err := collect(ctx, s, outDir, decls, maxBytes)
	if err != nil {
		return c, fmt.Errorf("collect %s: %w", outDir, err)
	}
	return c, nil
}

// outEntry is one thing found under outDir.
type outEntry struct {
	rel  string
	dir  bool
	size int64
	mode string // modeFile or modeExec
}

// MaxOutputEntries bounds how many files and directories Collect looks at
// under outDir, so that a job that leaves millions of them cannot exhaust the
// node's memory; more fail with ErrOutputTooLarge.
const MaxOutputEntries = 1 << 20

func collect(ctx context.Context, s Store, outDir string, decls []events.OutputDecl, maxBytes int64) (events.Collected, error) {
	root, err := os.OpenRoot(outDir)
	if err != nil {
		return events.Collected{}, err
	}
	defer root.Close()

	// WalkDir lists entries as they are (lstat): it neither reports a symlink
	// as what it points to nor descends into one. Depth first, so that the
	// entries under a directory follow it.
	var entries []outEntry
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(entries) == MaxOutputEntries {
			return fmt.Errorf("%w: more than %d files and directories", ErrOutputTooLarge, MaxOutputEntries)
		}
		switch {
		case d.IsDir():
			entries = append(entries, outEntry{rel: rel, dir: true})
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			entries = append(entries, outEntry{rel: rel, size: fi.Size(), mode: modeOf(fi.Mode())})
		}
		return nil
	})
	if err != nil {
		return events.Collected{}, err
	}

	c := events.Collected{Files: []events.OutputFile{}, Missing: []string{}}
	chosen := map[string]outEntry{}
	for _, d := range decls {
		pattern, err := cleanPattern(d.Path)
		found := false
		for i := 0; err == nil && i < len(entries); i++ {
			e := entries[i]
			if !Match(pattern, e.rel) {
				continue
			}
			if !e.dir {
				chosen[e.rel] = e
				found = true
				continue
			}
			// A directory stands for everything in it: the entries that
			// follow it and start with its path.
			for _, f := range entries[i+1:] {
				if !strings.HasPrefix(f.rel, e.rel+"/") {
					break
				}
				if !f.dir {
					chosen[f.rel] = f
					found = true
				}
			}
		}
		if !found {
			c.Missing = append(c.Missing, d.Path)
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(chosen)) {
		e := chosen[rel]
		c.Files = append(c.Files, events.OutputFile{Path: rel, Bytes: e.size, Mode: e.mode})
		c.Bytes += e.size
	}
	if maxBytes > 0 && c.Bytes > maxBytes {
		err := fmt.Errorf("%w: %d files, %d bytes, more than the %d allowed", ErrOutputTooLarge, len(c.Files), c.Bytes, maxBytes)
		return listed(c), err
	}

	// Hash everything, then store each content once: two uploads of one
	// name at the same time would both be stored, and the chunks of the
	// first left behind.
	hs := make([]hashed, len(c.Files))
	err = each(ctx, len(c.Files), Parallel, func(ctx context.Context, i int) error {
		f, err := openOutput(root, c.Files[i].Path, c.Files[i].Bytes)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Files[i].Path, err)
		}
		defer f.Close()
		if hs[i], err = hashFile(ctx, f, PartSize, noProgress{}); err != nil {
			return fmt.Errorf("%s: %w", c.Files[i].Path, err)
		}
		if hs[i].size != c.Files[i].Bytes {
			return fmt.Errorf("%s: %w: read %d bytes, %d when collected", c.Files[i].Path, ErrChanged, hs[i].size, c.Files[i].Bytes)
		}
		c.Files[i].Digest = hs[i].digest
		return nil
	})
	if err != nil {
		return events.Collected{}, err
	}
	var uniq []int
	seen := map[string]bool{}
	for i, h := range hs {
		if !seen[h.digest] {
			seen[h.digest] = true
			uniq = append(uniq, i)
		}
	}
	err = each(ctx, len(uniq), Parallel, func(ctx context.Context, k int) error {
		i := uniq[k]
		f, err := openOutput(root, c.Files[i].Path, c.Files[i].Bytes)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Files[i].Path, err)
		}
		defer f.Close()
		if err := putFile(ctx, s, f, hs[i], noProgress{}); err != nil {
			return fmt.Errorf("%s: %w", c.Files[i].Path, err)
		}
		return nil
	})
	if err != nil {
		return events.Collected{}, err
	}
	if len(c.Files) > 0 {
		// Last: a stored manifest means every file in it was stored.
		if c.Manifest, err = PutManifest(ctx, s, c.Files); err != nil {
			return events.Collected{}, fmt.Errorf("manifest: %w", err)
		}
	}
	return listed(c), nil
}

// listed cuts c's list of files to what one event lists, saying how many
// there are in Count when it lists only some.
func listed(c events.Collected) events.Collected {
	if l := events.Listed(c.Files); len(l) < len(c.Files) {
		c.Count = len(c.Files)
		c.Files = l
	}
	return c
}

// openOutput opens an output file that the walk saw as a regular file of
// the given size, and checks that it still is one.
func openOutput(root *os.Root, rel string, size int64) (*os.File, error) {
	// Non-blocking, so that a file swapped for a named pipe since the walk
	// cannot hang the open; the check after it refuses the pipe.
	f, err := root.OpenFile(rel, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: became a %s", ErrChanged, typeName(fi.Mode()))
	}
	// The total was checked against maxBytes with the sizes the walk saw, so
	// no file may have grown since.
	if fi.Size() != size {
		f.Close()
		return nil, fmt.Errorf("%w: %d bytes, %d when collected", ErrChanged, fi.Size(), size)
	}
	return f, nil
}

// Match reports whether the slash path name matches pattern. A pattern is a
// sequence of slash-separated elements, each matched against one element of
// name with path.Match semantics ('*' does not cross a slash), except that an
// element "**" matches any number of elements, none included: "**/*.csv"
// matches "a.csv" and "x/y/a.csv", "logs/**" matches everything under logs.
// "**" inside a longer element is an ordinary '*'. A malformed element
// matches nothing.
func Match(pattern, name string) bool {
	ps := strings.Split(pattern, "/")
	ns := strings.Split(name, "/")
	// ok[i][j]: ps[i:] matches ns[j:]. Filled from the end, so patterns with
	// many "**" cost len(ps)*len(ns), not exponential backtracking.
	ok := make([][]bool, len(ps)+1)
	for i := range ok {
		ok[i] = make([]bool, len(ns)+1)
	}
	ok[len(ps)][len(ns)] = true
	for i := len(ps) - 1; i >= 0; i-- {
		for j := len(ns); j >= 0; j-- {
			if ps[i] == "**" {
				ok[i][j] = ok[i+1][j] || (j < len(ns) && ok[i][j+1])
				continue
			}
			if j < len(ns) {
				m, err := path.Match(ps[i], ns[j])
				ok[i][j] = err == nil && m && ok[i+1][j+1]
			}
		}
	}
	return ok[0][0]
}

// CheckPattern reports whether p can declare output: a path or pattern (see
// Match) relative to the output directory, clean, without "..", and with
// well-formed elements. A trailing slash is allowed and ignored. SUBMIT uses
// it to refuse declarations that could never match, or could reach outside.
func CheckPattern(p string) error {
	_, err := cleanPattern(p)
	return err
}

func cleanPattern(p string) (string, error) {
	c := strings.TrimSuffix(p, "/")
	if err := checkPath(c); err != nil {
		return "", fmt.Errorf("output %q: %w", p, err)
	}
	for el := range strings.SplitSeq(c, "/") {
		if _, err := path.Match(el, ""); err != nil {
			return "", fmt.Errorf("output %q: %w", p, err)
		}
	}
	return c, nil
}
