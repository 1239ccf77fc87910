package stage

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// PartSize is the size of the parts a large file is split into, and the
// largest file stored as a single blob. An interrupted upload loses at most
// one part. It also bounds how far the server runs ahead of a download: a
// JetStream object is read through a flow-controlled consumer whose window
// grows towards the size of the object (up to 32 MiB), so with 16 MiB parts a
// download holds a few MiB in flight instead of 32. It is a variable so that
// tests can shrink it; it changes no digest, and files stored with another
// PartSize read the same.
var PartSize int64 = 16 << 20

// bufSize is the buffer of every copy: big enough to amortize system calls,
// small enough that memory stays flat with many files in flight.
const bufSize = 256 << 10

// bufs recycles copy buffers: a folder of many small files would otherwise
// allocate one per file, and the garbage collector would do most of the work.
var bufs = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// hashed is a local file as hashing found it.
type hashed struct {
	digest string
	size   int64
	// parts is nil for a file stored as one blob.
	parts []part
}

// hashFile reads f from the start and returns its digest, and the digest of
// each PartSize piece when there is more than one. One pass computes both.
func hashFile(ctx context.Context, f *os.File, partSize int64, p Progress) (hashed, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return hashed{}, err
	}
	whole := sha256.New()
	buf := bufs.Get().(*[]byte)
	defer bufs.Put(buf)
	r := ctxReader{ctx, f}
	var h hashed
	for {
		ph := sha256.New()
		n, err := io.CopyBuffer(io.MultiWriter(whole, ph, progressWriter{p}), io.LimitReader(r, partSize), *buf)
		if err != nil {
			return hashed{}, err
		}
		if n > 0 {
			h.parts = append(h.parts, part{Digest: hashDigest(ph), Size: n})
		}
		h.size += n
		if n < partSize {
			break
		}
	}
	h.digest = hashDigest(whole)
	if len(h.parts) <= 1 {
		h.parts = nil
	}
	return h, nil
}

// putFile stores the hashed file f unless it is already stored, sending only
// what is missing: the whole blob, or the missing parts and then the part
// list. Bytes sent or found already stored are reported to p.
func putFile(ctx context.Context, s Store, f *os.File, h hashed, p Progress) error {
	if h.parts == nil {
		name := blobName(h.digest)
		ok, err := present(ctx, s, name, h.digest, h.size)
		if err != nil {
			return err
		}
		if ok {
			p.Add(h.size)
			return nil
		}
		return s.Put(ctx, name, h.digest, h.size, progressReader{io.NewSectionReader(f, 0, h.size), p})
	}
	if err := statFile(ctx, s, h.digest, h.size); err == nil {
		p.Add(h.size)
		return nil
	}
	var off int64
	for i, pt := range h.parts {
		name := blobName(pt.Digest)
		ok, err := present(ctx, s, name, pt.Digest, pt.Size)
		if err != nil {
			return fmt.Errorf("part %d: %w", i, err)
		}
		if ok {
			p.Add(pt.Size)
		} else if err := s.Put(ctx, name, pt.Digest, pt.Size, progressReader{io.NewSectionReader(f, off, pt.Size), p}); err != nil {
			return fmt.Errorf("part %d: %w", i, err)
		}
		off += pt.Size
	}
	// Last, so that a part list in the store means every part was stored.
	list, err := json.Marshal(partList{Version: manifestVersion, Size: h.size, Parts: h.parts})
	if err != nil {
		return err
	}
	return putSmall(ctx, s, partsName(h.digest), list)
}

// statFile checks that the file with digest d and the given size is stored
// intact as far as the store's metadata tells, without reading it: the blob,
// or the part list and every part it names.
func statFile(ctx context.Context, s Store, d string, size int64) error {
	if err := checkDigest(d); err != nil {
		return err
	}
	info, err := s.Stat(ctx, blobName(d))
	if err == nil {
		if info.Digest != d || info.Size != size {
			return fmt.Errorf("%s: stored %d bytes %s, want %d bytes: %w", d, info.Size, info.Digest, size, ErrCorrupt)
		}
		return nil
	}
	if !errors.Is(err, ErrNotFound) {
		return err
	}
	l, err := loadPartList(ctx, s, d)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	if err != nil {
		return err
	}
	if l.Size != size {
		return fmt.Errorf("%s: part list says %d bytes, want %d: %w", d, l.Size, size, ErrCorrupt)
	}
	for i, pt := range l.Parts {
		info, err := s.Stat(ctx, blobName(pt.Digest))
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%s: part %d %s: %w", d, i, pt.Digest, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("%s: part %d: %w", d, i, err)
		}
		if info.Digest != pt.Digest || info.Size != pt.Size {
			return fmt.Errorf("%s: part %d: stored %d bytes %s, want %d bytes %s: %w", d, i, info.Size, info.Digest, pt.Size, pt.Digest, ErrCorrupt)
		}
	}
	return nil
}

// readFile streams the file with digest d and the given size into w,
// hashing as it goes, and fails with ErrCorrupt unless exactly those bytes
// arrived. w has then seen bad bytes: the caller writes somewhere it can
// throw away.
func readFile(ctx context.Context, s Store, d string, size int64, w io.Writer, p Progress) error {
	if err := checkDigest(d); err != nil {
		return err
	}
	err := readBlob(ctx, s, d, size, w, p)
	if !errors.Is(err, ErrNotFound) {
		return err
	}
	l, err := loadPartList(ctx, s, d)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s: %w", d, ErrNotFound)
	}
	if err != nil {
		return err
	}
	if l.Size != size {
		return fmt.Errorf("%s: part list says %d bytes, want %d: %w", d, l.Size, size, ErrCorrupt)
	}
	whole := sha256.New()
	for i, pt := range l.Parts {
		if err := readBlob(ctx, s, pt.Digest, pt.Size, io.MultiWriter(w, whole), p); err != nil {
			return fmt.Errorf("%s: part %d: %w", d, i, err)
		}
	}
	// Every part was right, but the list could name the wrong parts.
	if got := hashDigest(whole); got != d {
		return fmt.Errorf("%s: parts join to %s: %w", d, got, ErrCorrupt)
	}
	return nil
}

// readBlob streams the blob with digest d into w and checks it.
func readBlob(ctx context.Context, s Store, d string, size int64, w io.Writer, p Progress) error {
	rc, err := s.Get(ctx, blobName(d))
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	buf := bufs.Get().(*[]byte)
	defer bufs.Put(buf)
	// One byte more than expected is enough to know there is too much.
	n, err := io.CopyBuffer(io.MultiWriter(w, h, progressWriter{p}), io.LimitReader(rc, size+1), *buf)
	if err != nil {
		return fmt.Errorf("%s: %w", d, err)
	}
	if got := hashDigest(h); n != size || got != d {
		return fmt.Errorf("%s: read %d bytes %s, want %d bytes: %w", d, n, got, size, ErrCorrupt)
	}
	return nil
}
