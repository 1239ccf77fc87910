package stage

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/e31net/e31/pkg/events"
)

// Fetched is what FetchMissing did: the files (and their bytes) it fetched
// from the store, and the files it found in place already.
type Fetched struct {
	Files int
	Bytes int64
	Kept  int
}

// FetchMissing writes under dest the files of the list that are not there
// already, as Fetch writes them. A file in place is one that is a regular
// file of the listed size whose bytes, read from the disk, have the listed
// digest: it is left as it is (its mode included), and nothing of it is
// read from the store. So fetching the same output into the same place a
// second time asks the store for nothing, and a fetch cut short goes on
// where it stopped. p is told of the bytes of every listed file, those in
// place as found, the others as they come.
func FetchMissing(ctx context.Context, s Store, files []events.OutputFile, dest string, p Progress) (Fetched, error) {
	m := manifestOf(files)
	if err := m.check(); err != nil {
		return Fetched{}, fmt.Errorf("fetch: %w", err)
	}
	p = orNone(p)
	var need []events.OutputFile
	var done Fetched
	if root, err := os.OpenRoot(dest); err == nil {
		for i, it := range m.Files {
			ok, err := inPlace(root, it)
			if err != nil {
				root.Close()
				return Fetched{}, fmt.Errorf("fetch: check %s: %w", it.Path, err)
			}
			if ok {
				done.Kept++
				continue
			}
			need = append(need, files[i])
		}
		root.Close()
	} else if errors.Is(err, fs.ErrNotExist) {
		need = files
	} else {
		return Fetched{}, fmt.Errorf("fetch: %w", err)
	}
	var total int64
	for _, it := range m.Files {
		total += it.Size
	}
	for _, f := range need {
		done.Files++
		done.Bytes += f.Bytes
	}
	p.Start(total, "download "+dest)
	p.Add(total - done.Bytes)
	defer p.Done()
	if len(need) == 0 {
		return done, os.MkdirAll(dest, 0o755)
	}
	return done, fetch(ctx, s, manifestOf(need), dest, phaseless{p})
}

// inPlace reports whether root holds the item: a regular file (not a
// link) of its size whose content has its digest.
func inPlace(root *os.Root, it item) (bool, error) {
	info, err := root.Lstat(it.Path)
	if err != nil || !info.Mode().IsRegular() || info.Size() != it.Size {
		// Missing, a link or a folder, or a path through a file: the
		// fetch replaces it, or says why it cannot.
		return false, nil
	}
	f, err := root.Open(it.Path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return hashDigest(h) == it.Digest, nil
}

// phaseless passes on what is done and none of the phases: FetchMissing's
// one phase holds the fetch's.
type phaseless struct{ Progress }

func (phaseless) Start(int64, string) {}
func (phaseless) Done()               {}
