package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	"github.com/e31net/e31/pkg/api"
)

// Digest is the event digest of one stored message, as api.DigestVersion
// defines it. This is the audit's own implementation of the definition,
// written apart from the ledger's on purpose: two implementations of one
// written definition that agree are evidence, one shared function would
// only agree with itself.
func Digest(m Raw) [32]byte {
	// The kept headers, sorted; a message has a handful.
	var kept [12]string
	names := kept[:0]
	for name := range m.Headers {
		if isAttribute(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	bp := canonicalPool.Get().(*[]byte)
	b := append((*bp)[:0], api.DigestVersion...)
	b = append(b, '\n')
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	b = lengthPrefixed(b, m.Subject)
	b = binary.BigEndian.AppendUint32(b, uint32(len(names)))
	for _, name := range names {
		b = lengthPrefixed(b, name)
		b = binary.BigEndian.AppendUint32(b, uint32(len(m.Headers[name])))
		for _, v := range m.Headers[name] {
			b = lengthPrefixed(b, v)
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Body)))
	b = append(b, m.Body...)
	d := sha256.Sum256(b)
	*bp = b
	canonicalPool.Put(bp)
	return d
}

// canonicalPool keeps the buffers canonical bytes are written into: an
// audit digests every message of the log.
var canonicalPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// isAttribute reports whether a header is a CloudEvents attribute in binary
// mode: "ce-" anything, or content-type, in any case.
func isAttribute(name string) bool {
	switch {
	case len(name) >= 3 && (name[0]|0x20) == 'c' && (name[1]|0x20) == 'e' && name[2] == '-':
		return true
	case len(name) == len("content-type"):
		return strings.EqualFold(name, "content-type")
	}
	return false
}

func lengthPrefixed(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// HashChain is the hash chain over a log: H_n = SHA-256(H_{n-1} ‖ digest_n).
type HashChain struct {
	seq  uint64
	hash [32]byte
}

// Add moves the chain past a message with sequence seq and digest d.
func (c *HashChain) Add(seq uint64, d [32]byte) {
	var link [64]byte
	copy(link[:32], c.hash[:])
	copy(link[32:], d[:])
	c.hash = sha256.Sum256(link[:])
	c.seq = seq
}

// Head is the chain's value after the last message added.
func (c *HashChain) Head() api.Head {
	if c.seq == 0 {
		return api.Head{}
	}
	return api.Head{Seq: c.seq, Hash: hex.EncodeToString(c.hash[:])}
}

func digestText(d []byte) string { return "sha256:" + hex.EncodeToString(d) }
