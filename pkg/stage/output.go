package stage

import (
	"context"
	"fmt"

	"github.com/e31net/e31/pkg/events"
)

// A job's output is stored like a folder: its files as blobs (or parts), and
// a manifest of them all, in the same format as an uploaded folder. Events
// name the manifest and list only the first files, so the manifest is what
// says what was returned; from_job stages it as it is.

// itemOf is the manifest entry of a returned file. A file without a mode
// comes from an event written before modes were kept: it is not executable.
func itemOf(f events.OutputFile) item {
	mode := f.Mode
	if mode == "" {
		mode = modeFile
	}
	return item{Path: f.Path, Mode: mode, Size: f.Bytes, Digest: f.Digest}
}

// manifestOf is the folder of files.
func manifestOf(files []events.OutputFile) manifest {
	m := manifest{Version: manifestVersion, Files: make([]item, 0, len(files))}
	for _, f := range files {
		m.Files = append(m.Files, itemOf(f))
	}
	return m
}

// PutManifest stores the folder manifest of files, which must be stored
// already, and returns its digest. Paths must be relative and local
// (ErrUnsafePath otherwise) and appear once; modes are kept.
func PutManifest(ctx context.Context, s Store, files []events.OutputFile) (string, error) {
	b, err := manifestOf(files).encode()
	if err != nil {
		return "", err
	}
	d := bytesDigest(b)
	if err := putSmall(ctx, s, blobName(d), b); err != nil {
		return "", err
	}
	return d, nil
}

// ManifestFiles reads the folder manifest with the given digest, checking
// it against the digest, and returns its files, sorted by path.
func ManifestFiles(ctx context.Context, s Store, digest string) ([]events.OutputFile, error) {
	m, err := loadManifest(ctx, s, digest)
	if err != nil {
		return nil, err
	}
	files := make([]events.OutputFile, len(m.Files))
	for i, it := range m.Files {
		files[i] = events.OutputFile{Path: it.Path, Bytes: it.Size, Digest: it.Digest, Mode: it.Mode}
	}
	return files, nil
}

// OutputRef is a job's returned output as data for a later job (from_job):
// the folder its manifest names, or, for output recorded before manifests,
// a folder made of the files listed (see DirRef). It checks, as Verify
// does, that every file is stored; the caller sets Name.
func OutputRef(ctx context.Context, s Store, manifestDigest string, files []events.OutputFile) (events.DataRef, error) {
	if manifestDigest == "" {
		return DirRef(ctx, s, files)
	}
	m, err := loadManifest(ctx, s, manifestDigest)
	if err != nil {
		return events.DataRef{}, fmt.Errorf("output ref: %w", err)
	}
	if err := statItems(ctx, s, m.Files); err != nil {
		return events.DataRef{}, fmt.Errorf("output ref: %w", err)
	}
	return events.DataRef{Digest: manifestDigest, Kind: KindDir, Bytes: m.total(), Files: len(m.Files)}, nil
}
