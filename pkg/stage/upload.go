package stage

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/e31net/e31/pkg/events"
)

// The kinds of a DataRef.
const (
	KindFile = "file"
	KindDir  = "dir"
)

// Upload stores the file or folder at localPath and returns its reference:
// Digest, Kind, Bytes and Files (the caller sets Name). Whatever the store
// already has is not sent again, so uploading the same data twice sends
// nothing the second time, and an interrupted upload resumes where it
// stopped, to the part.
//
// localPath itself may be a symlink. Inside a folder, a symlink to a regular
// file is stored as the file it points to; a symlink to a folder, and
// anything that is neither a regular file nor a folder, fails with
// ErrUnsupported rather than being skipped silently. Empty folders are kept.
//
// p sees two phases: hashing, then sending.
func Upload(ctx context.Context, s Store, localPath string, p Progress) (events.DataRef, error) {
	p = orNone(p)
	fi, err := os.Stat(localPath)
	if err != nil {
		return events.DataRef{}, fmt.Errorf("upload %s: %w", localPath, err)
	}
	var ref events.DataRef
	switch {
	case fi.Mode().IsRegular():
		ref, err = uploadFile(ctx, s, localPath, p)
	case fi.IsDir():
		ref, err = uploadDir(ctx, s, localPath, p, nil)
	default:
		err = fmt.Errorf("%w: %s is a %s", ErrUnsupported, localPath, fi.Mode().Type())
	}
	if err != nil {
		return events.DataRef{}, fmt.Errorf("upload %s: %w", localPath, err)
	}
	return ref, nil
}

func uploadFile(ctx context.Context, s Store, localPath string, p Progress) (events.DataRef, error) {
	f, fi, err := openRegular(localPath)
	if err != nil {
		return events.DataRef{}, err
	}
	defer f.Close()
	label := filepath.Base(localPath)
	p.Start(fi.Size(), "hash "+label)
	h, err := hashFile(ctx, f, PartSize, p)
	p.Done()
	if err != nil {
		return events.DataRef{}, err
	}
	p.Start(h.size, "upload "+label)
	err = putFile(ctx, s, f, h, p)
	p.Done()
	if err != nil {
		return events.DataRef{}, err
	}
	return events.DataRef{Digest: h.digest, Kind: KindFile, Bytes: h.size, Files: 1}, nil
}

// localFile is one file of a folder being uploaded.
type localFile struct {
	rel  string // slash path in the manifest
	abs  string
	mode string
	h    hashed
}

func uploadDir(ctx context.Context, s Store, localPath string, p Progress, cache *HashCache) (events.DataRef, error) {
	// A walk does not descend into a symlink, even the one it starts from.
	root, err := filepath.EvalSymlinks(localPath)
	if err != nil {
		return events.DataRef{}, err
	}
	files, empty, total, err := walkLocal(root)
	if err != nil {
		return events.DataRef{}, err
	}
	label := filepath.Base(localPath)

	// Hash everything first: the manifest, and so the folder's digest, needs
	// every file's digest, and a file whose bytes are stored already need
	// not be read a second time.
	p.Start(total, "hash "+label)
	for i := range files {
		if err := hashLocal(ctx, &files[i], p, cache); err != nil {
			p.Done()
			return events.DataRef{}, fmt.Errorf("%s: %w", files[i].rel, err)
		}
	}
	p.Done()

	m := manifest{Dirs: empty}
	for _, f := range files {
		m.Files = append(m.Files, item{Path: f.rel, Mode: f.mode, Size: f.h.size, Digest: f.h.digest})
	}
	total = m.total()
	b, err := m.encode()
	if err != nil {
		return events.DataRef{}, err
	}

	// Each content once: two uploads of one name at the same time would both
	// be stored, and the chunks of the first left behind.
	var uniq []localFile
	seen := map[string]bool{}
	for _, f := range files {
		if !seen[f.h.digest] {
			seen[f.h.digest] = true
			uniq = append(uniq, f)
		} else {
			total -= f.h.size
		}
	}
	p.Start(total, "upload "+label)
	err = each(ctx, len(uniq), Parallel, func(ctx context.Context, i int) error {
		f, _, err := openRegular(uniq[i].abs)
		if err != nil {
			return fmt.Errorf("%s: %w", uniq[i].rel, err)
		}
		defer f.Close()
		if err := putFile(ctx, s, f, uniq[i].h, p); err != nil {
			return fmt.Errorf("%s: %w", uniq[i].rel, err)
		}
		return nil
	})
	if err == nil {
		// Last: a folder whose manifest is stored was stored whole.
		err = putSmall(ctx, s, blobName(bytesDigest(b)), b)
	}
	p.Done()
	if err != nil {
		return events.DataRef{}, err
	}
	return events.DataRef{Digest: bytesDigest(b), Kind: KindDir, Bytes: m.total(), Files: len(files)}, nil
}

func hashLocal(ctx context.Context, lf *localFile, p Progress, cache *HashCache) error {
	f, _, err := openRegular(lf.abs)
	if err != nil {
		return err
	}
	defer f.Close()
	if h, ok := cache.lookup(lf.rel, f); ok {
		lf.h = h
		p.Add(h.size)
		return nil
	}
	at := time.Now()
	lf.h, err = hashFile(ctx, f, PartSize, p)
	if err == nil {
		cache.remember(lf.rel, f, lf.h, at)
	}
	return err
}

// walkLocal lists the files of the folder at root, the directories in it
// that are empty, and the total size the walk saw.
func walkLocal(root string) (files []localFile, empty []string, total int64, err error) {
	children := map[string]int{}
	var dirs []string
	err = filepath.WalkDir(root, func(abs string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, abs)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if !utf8.ValidString(rel) {
			return fmt.Errorf("%w: %q: name is not UTF-8", ErrUnsupported, rel)
		}
		if err := checkPath(rel); err != nil {
			return err
		}
		children[parentOf(rel)]++
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			// The target stands in for the link, if it is a regular file.
			if fi, err = os.Stat(abs); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if !fi.Mode().IsRegular() {
				return fmt.Errorf("%w: %s is a symlink to a %s", ErrUnsupported, rel, typeName(fi.Mode()))
			}
		}
		switch {
		case fi.IsDir():
			dirs = append(dirs, rel)
		case fi.Mode().IsRegular():
			files = append(files, localFile{rel: rel, abs: abs, mode: modeOf(fi.Mode())})
			total += fi.Size()
		default:
			return fmt.Errorf("%w: %s is a %s", ErrUnsupported, rel, typeName(fi.Mode()))
		}
		return nil
	})
	for _, d := range dirs {
		if children[d] == 0 {
			empty = append(empty, d)
		}
	}
	return files, empty, total, err
}

// openRegular opens a local file for reading and checks that it is a
// regular file: what was one when the folder was walked may have been
// replaced since, and opening a named pipe would block.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|oNonblock, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w: %s is a %s", ErrUnsupported, path, typeName(fi.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

func parentOf(rel string) string {
	for i := len(rel) - 1; i >= 0; i-- {
		if rel[i] == '/' {
			return rel[:i]
		}
	}
	return "."
}

func typeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "folder"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	default:
		return "special file " + m.Type().String()
	}
}
