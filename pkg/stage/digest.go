package stage

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
)

const digestPrefix = "sha256:"

// hashDigest formats a sha256 as a digest: "sha256:<hex>".
func hashDigest(h hash.Hash) string { return digestPrefix + hex.EncodeToString(h.Sum(nil)) }

// bytesDigest is the digest of b.
func bytesDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return digestPrefix + hex.EncodeToString(sum[:])
}

// digestBytes parses "sha256:<64 lowercase hex>". Only the canonical form is
// accepted, so that one content has exactly one name.
func digestBytes(d string) ([]byte, error) {
	h, ok := strings.CutPrefix(d, digestPrefix)
	if !ok || len(h) != 2*sha256.Size || strings.ToLower(h) != h {
		return nil, fmt.Errorf("%w: digest %q is not sha256:<64 lowercase hex digits>", ErrBadRef, d)
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return nil, fmt.Errorf("%w: digest %q is not sha256:<64 lowercase hex digits>", ErrBadRef, d)
	}
	return b, nil
}

func checkDigest(d string) error {
	_, err := digestBytes(d)
	return err
}

// blobName is where the bytes with digest d are stored.
func blobName(d string) string { return "blob/sha256/" + strings.TrimPrefix(d, digestPrefix) }

// partsName is where the part list of the large file with digest d is stored.
func partsName(d string) string { return "parts/sha256/" + strings.TrimPrefix(d, digestPrefix) }
