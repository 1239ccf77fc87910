package stage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// manifest is a folder: every file in it and every empty directory. Its
// canonical encoding (see encode) is stored as a blob, and the folder's digest
// is the digest of that encoding.
type manifest struct {
	// Version is 1. A reader refuses versions it does not know rather than
	// guess what new fields mean.
	Version int    `json:"version"`
	Files   []item `json:"files"`
	// Dirs lists the directories that contain nothing, so that they come back
	// too; every other directory is implied by the files in it.
	Dirs []string `json:"dirs,omitempty"`
}

// item is one file of a manifest.
type item struct {
	// Path is relative to the folder, with slashes, clean and local.
	Path string `json:"path"`
	// Mode is "0644", or "0755" for an executable file: the only bit kept is
	// whether the file may be executed. Owner, group and the rest belong to
	// the machine that writes the file.
	Mode   string `json:"mode"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// The two modes a manifest records.
const (
	modeFile = "0644"
	modeExec = "0755"
)

// manifestVersion is the only manifest.Version this package reads and writes.
const manifestVersion = 1

// MaxManifestBytes bounds the manifests and part lists this package reads,
// so that a hostile one cannot exhaust memory. 64 MiB is a few hundred
// thousand files.
const MaxManifestBytes = 64 << 20

// encode returns the canonical encoding of m: files sorted by path, empty
// directories sorted, compact JSON with the fields in a fixed order. Equal
// folders encode to equal bytes, and so have equal digests.
func (m manifest) encode() ([]byte, error) {
	m.Version = manifestVersion
	m.Files = slices.Clone(m.Files)
	slices.SortFunc(m.Files, func(a, b item) int { return strings.Compare(a.Path, b.Path) })
	m.Dirs = slices.Clone(m.Dirs)
	slices.Sort(m.Dirs)
	if m.Files == nil {
		m.Files = []item{}
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// total is the size of all the files together.
func (m manifest) total() int64 {
	var n int64
	for _, it := range m.Files {
		n += it.Size
	}
	return n
}

// check reports whether m can be written to disk as it says: versions,
// modes, sizes and digests are well formed, every path is safe, no path
// appears twice and no file sits where another entry needs a directory.
func (m manifest) check() error {
	if m.Version != manifestVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrBadManifest, m.Version, manifestVersion)
	}
	files := make(map[string]bool, len(m.Files))
	var total int64
	for _, it := range m.Files {
		if err := checkPath(it.Path); err != nil {
			return err
		}
		if it.Mode != modeFile && it.Mode != modeExec {
			return fmt.Errorf("%w: %s: mode %q is neither %s nor %s", ErrBadManifest, it.Path, it.Mode, modeFile, modeExec)
		}
		if it.Size < 0 || it.Size > math.MaxInt64-total {
			return fmt.Errorf("%w: %s: size %d", ErrBadManifest, it.Path, it.Size)
		}
		total += it.Size
		if err := checkDigest(it.Digest); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrBadManifest, it.Path, err)
		}
		if files[it.Path] {
			return fmt.Errorf("%w: %s appears twice", ErrBadManifest, it.Path)
		}
		files[it.Path] = true
	}
	dirs := make(map[string]bool, len(m.Dirs))
	for _, d := range m.Dirs {
		if err := checkPath(d); err != nil {
			return err
		}
		if files[d] || dirs[d] {
			return fmt.Errorf("%w: %s appears twice", ErrBadManifest, d)
		}
		dirs[d] = true
	}
	// A file may not be the parent of anything.
	parentIsFile := func(p string) error {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if files[dir] {
				return fmt.Errorf("%w: %s is a file and the parent of %s", ErrBadManifest, dir, p)
			}
		}
		return nil
	}
	for _, it := range m.Files {
		if err := parentIsFile(it.Path); err != nil {
			return err
		}
	}
	for _, d := range m.Dirs {
		if err := parentIsFile(d); err != nil {
			return err
		}
	}
	return nil
}

// checkPath accepts a relative, clean, local slash path: no "..", no leading
// "/", no empty or "." elements, no NUL, valid UTF-8, and nothing the local
// operating system would read as leaving the directory (a volume name or a
// reserved device name on Windows).
func checkPath(p string) error {
	if p == "" || p == "." || !utf8.ValidString(p) || strings.ContainsRune(p, 0) ||
		path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") ||
		!filepath.IsLocal(filepath.FromSlash(p)) {
		return fmt.Errorf("%w: %q", ErrUnsafePath, p)
	}
	return nil
}

// decodeManifest parses and checks a manifest.
func decodeManifest(b []byte) (manifest, error) {
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return manifest{}, fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	if err := m.check(); err != nil {
		return manifest{}, err
	}
	return m, nil
}

// partList is how a file larger than PartSize is stored: its parts, in order.
type partList struct {
	Version int    `json:"version"`
	Size    int64  `json:"size"`
	Parts   []part `json:"parts"`
}

// part is one piece of a large file, stored as a blob.
type part struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// check reports whether the parts are well formed and add up to l.Size.
// Whether they really are the file is only known once they are read back and
// hashed together.
func (l partList) check() error {
	if l.Version != manifestVersion {
		return fmt.Errorf("%w: part list version %d, want %d", ErrBadManifest, l.Version, manifestVersion)
	}
	if len(l.Parts) == 0 {
		return fmt.Errorf("%w: part list without parts", ErrBadManifest)
	}
	var total int64
	for i, p := range l.Parts {
		if p.Size <= 0 || p.Size > math.MaxInt64-total {
			return fmt.Errorf("%w: part %d: size %d", ErrBadManifest, i, p.Size)
		}
		total += p.Size
		if err := checkDigest(p.Digest); err != nil {
			return fmt.Errorf("%w: part %d: %w", ErrBadManifest, i, err)
		}
	}
	if total != l.Size {
		return fmt.Errorf("%w: parts add up to %d bytes, the file has %d", ErrBadManifest, total, l.Size)
	}
	return nil
}

// readSmall reads a whole object that is known to be small (a manifest or a
// part list), refusing more than MaxManifestBytes.
func readSmall(ctx context.Context, s Store, name string) ([]byte, error) {
	rc, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadManifest, name, MaxManifestBytes)
	}
	return b, nil
}

// loadManifest reads the manifest with digest d and checks that it is the
// one that digest names.
func loadManifest(ctx context.Context, s Store, d string) (manifest, error) {
	if err := checkDigest(d); err != nil {
		return manifest{}, err
	}
	b, err := readSmall(ctx, s, blobName(d))
	if err != nil {
		return manifest{}, fmt.Errorf("manifest %s: %w", d, err)
	}
	if got := bytesDigest(b); got != d {
		return manifest{}, fmt.Errorf("manifest %s: content is %s: %w", d, got, ErrCorrupt)
	}
	m, err := decodeManifest(b)
	if err != nil {
		return manifest{}, fmt.Errorf("manifest %s: %w", d, err)
	}
	return m, nil
}

// loadPartList reads the part list of the file with digest d.
func loadPartList(ctx context.Context, s Store, d string) (partList, error) {
	b, err := readSmall(ctx, s, partsName(d))
	if err != nil {
		return partList{}, err
	}
	var l partList
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return partList{}, fmt.Errorf("part list of %s: %w: %w", d, ErrBadManifest, err)
	}
	if err := l.check(); err != nil {
		return partList{}, fmt.Errorf("part list of %s: %w", d, err)
	}
	return l, nil
}

// putSmall stores b under name unless an intact copy is already there.
func putSmall(ctx context.Context, s Store, name string, b []byte) error {
	d := bytesDigest(b)
	if ok, err := present(ctx, s, name, d, int64(len(b))); err != nil || ok {
		return err
	}
	return s.Put(ctx, name, d, int64(len(b)), bytes.NewReader(b))
}

// present reports whether name holds size bytes with digest d, as far as
// the store's metadata tells. An object that is there but wrong is reported
// absent, so that an upload replaces it.
func present(ctx context.Context, s Store, name, d string, size int64) (bool, error) {
	info, err := s.Stat(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrCorrupt):
		return false, nil
	case err != nil:
		return false, err
	}
	return info.Digest == d && info.Size == size, nil
}

// modeOf is the manifest mode of a local file.
func modeOf(m fs.FileMode) string {
	if m&0o111 != 0 {
		return modeExec
	}
	return modeFile
}
