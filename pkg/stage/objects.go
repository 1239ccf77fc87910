package stage

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
)

// Expander lists the objects that stored data needs: what must stay in the
// store while any job holds the data, and what may go once none does. The
// store is content addressed, so one object may belong to many jobs; the
// caller counts, this only names.
//
// It remembers what it learned about each file once the file was stored
// whole (its storage does not change after that), so that a file in many
// folders, or a folder many jobs hold, is looked up once. All methods may
// be called concurrently.
type Expander struct {
	s     Store
	mu    sync.Mutex
	files map[string][]string // file digest → its objects
}

// NewExpander returns an Expander over s.
func NewExpander(s Store) *Expander {
	return &Expander{s: s, files: map[string][]string{}}
}

// Objects returns the names of the objects the data of the given kind
// (KindFile or KindDir) and digest is stored in, sorted: for a file its
// blob and part list names and, if it is stored in parts, every part; for a
// folder its manifest and every file's objects. complete is false when
// something was not stored (missing, or a manifest or part list that does
// not parse): the names listed are then those it would have, as far as
// they are known, and asking again later may tell more. An error means the
// store could not tell.
func (e *Expander) Objects(ctx context.Context, kind, digest string) (names []string, complete bool, err error) {
	if err := checkDigest(digest); err != nil {
		return nil, false, err
	}
	switch kind {
	case KindFile:
		names, complete, err = e.file(ctx, digest)
	case KindDir:
		names, complete, err = e.dir(ctx, digest)
	default:
		return nil, false, ErrBadRef
	}
	if err != nil {
		return nil, false, err
	}
	slices.Sort(names)
	return slices.Compact(names), complete, nil
}

// missing reports whether err says the data is not (intact) in the store,
// as opposed to the store not answering.
func missing(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrBadManifest) || errors.Is(err, ErrBadRef)
}

func (e *Expander) file(ctx context.Context, d string) ([]string, bool, error) {
	e.mu.Lock()
	known, ok := e.files[d]
	e.mu.Unlock()
	if ok {
		return slices.Clone(known), true, nil
	}
	// Both names always: which one holds the file depends on the part size
	// when it was uploaded, and a later upload may use the other.
	names := []string{blobName(d), partsName(d)}
	_, err := e.s.Stat(ctx, blobName(d))
	switch {
	case err == nil:
	case errors.Is(err, ErrNotFound):
		l, err := loadPartList(ctx, e.s, d)
		if missing(err) {
			return names, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		for _, p := range l.Parts {
			names = append(names, blobName(p.Digest))
		}
	case missing(err):
		return names, false, nil
	default:
		return nil, false, err
	}
	e.mu.Lock()
	e.files[d] = names
	e.mu.Unlock()
	return slices.Clone(names), true, nil
}

func (e *Expander) dir(ctx context.Context, d string) ([]string, bool, error) {
	names := []string{blobName(d)}
	m, err := loadManifest(ctx, e.s, d)
	if missing(err) {
		return names, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	// Each content once: folders often hold many copies of one file.
	var digests []string
	seen := map[string]bool{}
	for _, it := range m.Files {
		if !seen[it.Digest] {
			seen[it.Digest] = true
			digests = append(digests, it.Digest)
		}
	}
	found := make([][]string, len(digests))
	whole := make([]bool, len(digests))
	err = each(ctx, len(digests), Parallel, func(ctx context.Context, i int) error {
		var err error
		found[i], whole[i], err = e.file(ctx, digests[i])
		return err
	})
	if err != nil {
		return nil, false, err
	}
	complete := true
	for i := range found {
		names = append(names, found[i]...)
		complete = complete && whole[i]
	}
	return names, complete, nil
}

// Forget drops what the Expander remembers about the files stored in the
// named objects, because they were deleted: if the bytes are stored again,
// it may be in another way.
func (e *Expander) Forget(names []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range names {
		for _, prefix := range []string{"blob/sha256/", "parts/sha256/"} {
			if hex, ok := strings.CutPrefix(n, prefix); ok {
				delete(e.files, digestPrefix+hex)
			}
		}
	}
}

// DeleteObjects removes the named objects from s, Parallel at a time.
// Objects that are already gone are not an error, so a deletion that was
// interrupted can simply run again.
func DeleteObjects(ctx context.Context, s Store, names []string) error {
	return each(ctx, len(names), Parallel, func(ctx context.Context, i int) error {
		return s.Delete(ctx, names[i])
	})
}
