package stage

import (
	"context"
	"fmt"

	"github.com/e31net/e31/pkg/events"
)

// Verify checks that the data ref names is in the store and intact as far
// as metadata tells, without downloading it: every object is there, with the
// size and digest the store recorded when it was written, and those are the
// ones the reference expects. For a folder that means its manifest (which is
// read and checked against the folder's digest) and every file it lists.
// The error names the first missing or damaged file. SUBMIT calls it for
// every staged input; the bytes themselves are checked when RUN downloads
// them. A ref with only FromJob set names no data yet: resolve it with
// DirRef first.
func Verify(ctx context.Context, s Store, ref events.DataRef) error {
	if err := verify(ctx, s, ref); err != nil {
		return fmt.Errorf("verify %s: %w", refLabel(ref), err)
	}
	return nil
}

func verify(ctx context.Context, s Store, ref events.DataRef) error {
	if err := checkDigest(ref.Digest); err != nil {
		return err
	}
	switch ref.Kind {
	case KindFile:
		return statFile(ctx, s, ref.Digest, ref.Bytes)
	case KindDir:
		m, err := loadManifest(ctx, s, ref.Digest)
		if err != nil {
			return err
		}
		if m.total() != ref.Bytes || len(m.Files) != ref.Files {
			return fmt.Errorf("%w: it says %d files, %d bytes; its manifest %d files, %d bytes", ErrBadRef, ref.Files, ref.Bytes, len(m.Files), m.total())
		}
		return statItems(ctx, s, m.Files)
	default:
		return fmt.Errorf("%w: kind %q is neither %q nor %q", ErrBadRef, ref.Kind, KindFile, KindDir)
	}
}

// statItems runs statFile for every item, in parallel.
func statItems(ctx context.Context, s Store, items []item) error {
	return each(ctx, len(items), Parallel, func(ctx context.Context, i int) error {
		if err := statFile(ctx, s, items[i].Digest, items[i].Size); err != nil {
			return fmt.Errorf("%s: %w", items[i].Path, err)
		}
		return nil
	})
}

// DirRef makes a folder of files that are stored already and returns its
// reference (Kind "dir"; the caller sets Name), so that an earlier job's
// output becomes a later job's data without passing through the client. It
// checks that every file is there (as Verify does) and stores the folder's
// manifest. A file is executable if its Mode says so. Paths must be
// relative and local (ErrUnsafePath otherwise) and appear once.
func DirRef(ctx context.Context, s Store, files []events.OutputFile) (events.DataRef, error) {
	m := manifestOf(files)
	b, err := m.encode()
	if err != nil {
		return events.DataRef{}, fmt.Errorf("dir ref: %w", err)
	}
	if err := statItems(ctx, s, m.Files); err != nil {
		return events.DataRef{}, fmt.Errorf("dir ref: %w", err)
	}
	d := bytesDigest(b)
	if err := putSmall(ctx, s, blobName(d), b); err != nil {
		return events.DataRef{}, fmt.Errorf("dir ref: %w", err)
	}
	return events.DataRef{Digest: d, Kind: KindDir, Bytes: m.total(), Files: len(m.Files)}, nil
}
