package stage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// What an object's name says it holds, for a Store that stands between a
// writer it does not trust and the store (pkg/gate, between a run node and
// its job's submitter's bucket): which names are content addressed, and
// so checked by what they hold, and which belong to one attempt's log.

// BlobDigest is the digest the name of a blob says its bytes have
// ("blob/sha256/<hex>" gives "sha256:<hex>"), and false for any other
// name. A blob is stored only if its bytes have that digest (Store.Put).
func BlobDigest(name string) (string, bool) {
	return namedDigest(name, "blob/sha256/")
}

// PartsDigest is the digest of the file whose part list the name holds
// ("parts/sha256/<hex>"), and false for any other name. Unlike a blob's,
// a part list's bytes do not have the digest of its name: CheckPartList
// tells whether it is the file's.
func PartsDigest(name string) (string, bool) {
	return namedDigest(name, "parts/sha256/")
}

func namedDigest(name, prefix string) (string, bool) {
	hex, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return "", false
	}
	d := digestPrefix + hex
	if checkDigest(d) != nil {
		return "", false
	}
	return d, true
}

// IsLogOf reports whether name is an object of the log of job's attempt
// (JobLog): its index or one of its chunks.
func IsLogOf(name, job string, attempt int) bool {
	rest, ok := strings.CutPrefix(name, logPrefix(job, attempt))
	if !ok {
		return false
	}
	if rest == "index" {
		return true
	}
	stream, off, ok := strings.Cut(rest, "/")
	if !ok || (stream != Stdout && stream != Stderr) {
		return false
	}
	n, err := strconv.ParseInt(off, 10, 64)
	return err == nil && n >= 0 && logChunkName(job, attempt, stream, n) == name
}

// CheckPartList reports whether list, to be stored as the part list of the
// file with digest d, is it: a well-formed list whose parts are stored
// intact and, read back and hashed together, are the file. It reads every
// part once. An error wrapping ErrBadManifest or ErrCorrupt says it is not
// (ErrNotFound: a part is missing); any other, that the store could not
// tell.
func CheckPartList(ctx context.Context, s Store, d string, list []byte) error {
	if err := checkDigest(d); err != nil {
		return err
	}
	if len(list) > MaxManifestBytes {
		return fmt.Errorf("part list of %s: %w: larger than %d bytes", d, ErrBadManifest, MaxManifestBytes)
	}
	var l partList
	dec := json.NewDecoder(bytes.NewReader(list))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return fmt.Errorf("part list of %s: %w: %w", d, ErrBadManifest, err)
	}
	if err := l.check(); err != nil {
		return fmt.Errorf("part list of %s: %w", d, err)
	}
	whole := sha256.New()
	for i, pt := range l.Parts {
		if err := readBlob(ctx, s, pt.Digest, pt.Size, whole, noProgress{}); err != nil {
			return fmt.Errorf("part list of %s: part %d: %w", d, i, err)
		}
	}
	if got := hashDigest(whole); got != d {
		return fmt.Errorf("part list of %s: its parts join to %s: %w", d, got, ErrCorrupt)
	}
	return nil
}
