package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"sort"
	"strings"

	"github.com/e31net/e31/pkg/chain"
)

// This file implements pkg/chain/SPEC.md, written from that text and not
// from the ledger's code (services/ledger/digest.go): the two are tested
// against the same golden vectors (pkg/chain/testdata), computed from the
// text alone. Two implementations that agree with a third are evidence that
// the ledger's record of the log is right; one shared function would only
// agree with itself. This one favours plainness over speed: it streams the
// canonical bytes into the hash instead of building them in a buffer.

// Digest is the event digest of one stored message: the SHA-256 of its
// canonical bytes (SPEC.md, "Event digest").
func Digest(m Raw) [32]byte {
	h := sha256.New()
	writeCanonical(h, m)
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// writeCanonical writes m's canonical bytes to w, in the order SPEC.md
// lists them. A hash.Hash never fails to write, so errors are not returned.
func writeCanonical(w io.Writer, m Raw) {
	c := canonical{w: w}
	c.bytes([]byte(chain.Version + "\n"))
	c.u64(m.Seq)
	c.str(m.Subject)
	names := attributes(m.Headers)
	c.u32(len(names))
	for _, name := range names {
		values := m.Headers[name]
		c.str(name)
		c.u32(len(values))
		for _, v := range values {
			c.str(v)
		}
	}
	c.u32(len(m.Body))
	c.bytes(m.Body)
}

// attributes are the names of the headers the digest keeps, sorted as
// bytes: the CloudEvents attributes ("ce-" anything, in any case) and
// content-type, written as stored.
func attributes(headers map[string][]string) []string {
	var names []string
	for name := range headers {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "ce-") || lower == "content-type" {
			names = append(names, name)
		}
	}
	// Go compares strings bytewise, which is what the spec asks.
	sort.Strings(names)
	return names
}

// canonical writes the spec's fields: big-endian integers, and strings
// prefixed with their length.
type canonical struct {
	w   io.Writer
	num [8]byte
}

func (c *canonical) bytes(b []byte) { _, _ = c.w.Write(b) }

func (c *canonical) u32(n int) {
	binary.BigEndian.PutUint32(c.num[:4], uint32(n))
	c.bytes(c.num[:4])
}

func (c *canonical) u64(n uint64) {
	binary.BigEndian.PutUint64(c.num[:], n)
	c.bytes(c.num[:])
}

func (c *canonical) str(s string) {
	c.u32(len(s))
	_, _ = io.WriteString(c.w, s)
}

// HashChain is the hash chain over a log (SPEC.md, "Hash chain"): it
// starts at 32 zero bytes, and each message links the value before it to
// its digest.
type HashChain struct {
	seq   uint64
	value [32]byte
}

// Add moves the chain past a message with sequence seq and digest d:
// H_n = SHA-256(H_{n-1} ‖ d).
func (c *HashChain) Add(seq uint64, d [32]byte) {
	link := sha256.New()
	link.Write(c.value[:])
	link.Write(d[:])
	link.Sum(c.value[:0])
	c.seq = seq
}

// Head is the chain's value after the last message added, "S:<hex>"; the
// zero Head before any.
func (c *HashChain) Head() chain.Head {
	if c.seq == 0 {
		return chain.Head{}
	}
	return chain.Head{Seq: c.seq, Hash: hex.EncodeToString(c.value[:])}
}

// digestText is how a record writes a digest: "sha256:<hex>".
func digestText(d []byte) string { return "sha256:" + hex.EncodeToString(d) }
