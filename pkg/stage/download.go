package stage

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/e31net/e31/pkg/events"
)

// Download materializes the data ref names at dest: dest becomes the file,
// or the folder. Every byte is checked against its digest as it streams; a
// tampered, truncated or missing object fails the download with an error
// that names the file.
//
// ref must be as Upload or DirRef returned it: its Bytes and Files are
// checked against what is stored. dest must not exist; its parent is created
// if needed. Files are 0644
// (0755 if executable) and directories 0755, whatever the umask, because a
// sandboxed job runs as another, unprivileged user and must read them.
// Everything is written under a temporary name in dest's parent, readable
// only by its owner, and renamed to dest once every digest checked, so a
// failed Download leaves nothing at dest and nothing half-written is ever
// visible to anyone else (a crash can leave a ".e31-stage-*" entry beside
// dest, which RUN removes with the job's workspace). Paths in a manifest are never trusted: any that is
// not relative and local fails with ErrUnsafePath before anything is
// written, and writes go through an os.Root.
func Download(ctx context.Context, s Store, ref events.DataRef, dest string, p Progress) error {
	if err := download(ctx, s, ref, dest, orNone(p)); err != nil {
		return fmt.Errorf("download %s: %w", refLabel(ref), err)
	}
	return nil
}

func refLabel(ref events.DataRef) string {
	if ref.Name != "" {
		return ref.Name
	}
	return ref.Digest
}

func download(ctx context.Context, s Store, ref events.DataRef, dest string, p Progress) error {
	if err := checkDigest(ref.Digest); err != nil {
		return err
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("%s: %w", dest, fs.ErrExist)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dest)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	switch ref.Kind {
	case KindFile:
		p.Start(ref.Bytes, "download "+refLabel(ref))
		defer p.Done()
		f, err := os.CreateTemp(parent, ".e31-stage-*")
		if err != nil {
			return err
		}
		done := false
		defer func() {
			if !done {
				f.Close()
				os.Remove(f.Name())
			}
		}()
		if err := readFile(ctx, s, ref.Digest, ref.Bytes, f, p); err != nil {
			return err
		}
		if err := f.Chmod(0o644); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Rename(f.Name(), dest); err != nil {
			return err
		}
		done = true
		return nil

	case KindDir:
		m, err := loadManifest(ctx, s, ref.Digest)
		if err != nil {
			return err
		}
		if m.total() != ref.Bytes || len(m.Files) != ref.Files {
			return fmt.Errorf("%w: it says %d files, %d bytes; its manifest %d files, %d bytes", ErrBadRef, ref.Files, ref.Bytes, len(m.Files), m.total())
		}
		p.Start(ref.Bytes, "download "+refLabel(ref))
		defer p.Done()
		tmp, err := os.MkdirTemp(parent, ".e31-stage-*")
		if err != nil {
			return err
		}
		done := false
		defer func() {
			if !done {
				os.RemoveAll(tmp)
			}
		}()
		if err := materialize(ctx, s, tmp, m, p); err != nil {
			return err
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return err
		}
		if err := os.Rename(tmp, dest); err != nil {
			return err
		}
		done = true
		return nil

	default:
		return fmt.Errorf("%w: kind %q is neither %q nor %q", ErrBadRef, ref.Kind, KindFile, KindDir)
	}
}

// materialize writes the folder m describes into the empty directory dir.
func materialize(ctx context.Context, s Store, dir string, m manifest, p Progress) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()

	// Every directory, parents first (a path sorts before its extensions),
	// each made 0755 explicitly because Mkdir is subject to the umask.
	set := map[string]bool{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			set[d] = true
		}
	}
	for _, d := range m.Dirs {
		set[d] = true
		addParents(d)
	}
	for _, it := range m.Files {
		addParents(it.Path)
	}
	for _, d := range slices.Sorted(maps.Keys(set)) {
		if err := root.Mkdir(d, 0o755); err != nil {
			return err
		}
		if err := root.Chmod(d, 0o755); err != nil {
			return err
		}
	}

	return each(ctx, len(m.Files), Parallel, func(ctx context.Context, i int) error {
		it := m.Files[i]
		if err := writeItem(ctx, s, root, it, p); err != nil {
			return fmt.Errorf("%s: %w", it.Path, err)
		}
		return nil
	})
}

func writeItem(ctx context.Context, s Store, root *os.Root, it item, p Progress) error {
	// O_EXCL: a path never silently replaces another, nor follows a link.
	f, err := root.OpenFile(it.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := readFile(ctx, s, it.Digest, it.Size, f, p); err != nil {
		return err
	}
	mode := fs.FileMode(0o644)
	if it.Mode == modeExec {
		mode = 0o755
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	return f.Close()
}

// Fetch writes returned files under dest, creating dest and the directories
// in it as needed, and checks each file against its digest as it streams; a
// mismatch or a missing object fails with an error naming the file.
//
// Each file is written under a temporary name beside it and renamed into
// place once verified, so a bad file never appears under a returned name.
// A file that exists already is replaced (fetching twice is harmless). Any
// path that is not relative and local fails with ErrUnsafePath before
// anything is written, and writes go through an os.Root, so a symlink in
// dest cannot lead them outside it. Files and directories get the usual
// 0644 and 0755 (0755 for a file whose Mode says it is executable), less
// the umask: they belong to the user who fetched them. A list with a path
// twice, or a file where another needs a directory, fails with
// ErrBadManifest.
func Fetch(ctx context.Context, s Store, files []events.OutputFile, dest string, p Progress) error {
	m := manifestOf(files)
	if err := m.check(); err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	return fetch(ctx, s, m, dest, orNone(p))
}

// FetchDir writes the folder whose manifest has the given digest under
// dest, as Fetch writes a list of files: a job's whole output, however many
// files its events list. The manifest is checked against its digest first.
func FetchDir(ctx context.Context, s Store, digest, dest string, p Progress) error {
	m, err := loadManifest(ctx, s, digest)
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	return fetch(ctx, s, m, dest, orNone(p))
}

// fetch writes the checked manifest m under dest.
func fetch(ctx context.Context, s Store, m manifest, dest string, p Progress) error {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	defer root.Close()
	for _, d := range m.Dirs {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("fetch %s: %w", d, err)
		}
	}
	p.Start(m.total(), "download "+filepath.Base(dest))
	defer p.Done()
	return each(ctx, len(m.Files), Parallel, func(ctx context.Context, i int) error {
		it := m.Files[i]
		if err := fetchItem(ctx, s, root, it, p); err != nil {
			return fmt.Errorf("fetch %s: %w", it.Path, err)
		}
		return nil
	})
}

func fetchItem(ctx context.Context, s Store, root *os.Root, it item, p Progress) error {
	dir := path.Dir(it.Path)
	if dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	tmp := path.Join(dir, ".e31-fetch-"+rand.Text())
	perm := fs.FileMode(0o644)
	if it.Mode == modeExec {
		perm = 0o755
	}
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	err = readFile(ctx, s, it.Digest, it.Size, f, p)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, it.Path)
	}
	if err != nil {
		if rerr := root.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("remove the partial %s: %w", tmp, rerr))
		}
		return err
	}
	return nil
}
