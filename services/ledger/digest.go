package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/e31net/e31/pkg/chain"
)

// digestPrefix opens the canonical bytes of an event (chain.Version).
const digestPrefix = chain.Version + "\n"

// eventDigest is the SHA-256 of a stored message's canonical bytes, as
// pkg/chain/SPEC.md defines them. The audit computes the same with code of
// its own, written from the same text; both are tested against its golden
// vectors: two implementations of one written definition that agree are
// what an auditor can trust, where one shared function would only agree
// with itself.
func eventDigest(seq uint64, subject string, h nats.Header, body []byte) [32]byte {
	var kept [12]string
	names := kept[:0]
	for name := range h {
		if isAttribute(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	bp := buffers.Get().(*[]byte)
	b := append((*bp)[:0], digestPrefix...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = appendString(b, subject)
	b = binary.BigEndian.AppendUint32(b, uint32(len(names)))
	for _, name := range names {
		b = appendString(b, name)
		b = binary.BigEndian.AppendUint32(b, uint32(len(h[name])))
		for _, v := range h[name] {
			b = appendString(b, v)
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	sum := sha256.Sum256(b)
	*bp = b
	buffers.Put(bp)
	return sum
}

// buffers keeps the buffers canonical bytes are built in: every message of
// the log is digested on every start.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// isAttribute reports whether a header is a CloudEvents attribute, and so
// part of what an event says.
func isAttribute(name string) bool {
	if len(name) >= 3 && strings.EqualFold(name[:3], "ce-") {
		return true
	}
	return strings.EqualFold(name, "content-type")
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// hashChain is the running hash over every message of the log.
type hashChain struct {
	seq  uint64
	hash [32]byte
}

// add moves the chain past one message: H_n = SHA-256(H_{n-1} ‖ digest_n).
func (c *hashChain) add(seq uint64, digest [32]byte) {
	var buf [64]byte
	copy(buf[:32], c.hash[:])
	copy(buf[32:], digest[:])
	c.hash = sha256.Sum256(buf[:])
	c.seq = seq
}

// head is the chain as pkg/chain shows it.
func (c *hashChain) head() chain.Head {
	if c.seq == 0 {
		return chain.Head{}
	}
	return chain.Head{Seq: c.seq, Hash: hex.EncodeToString(c.hash[:])}
}

func sha256Text(d []byte) string { return "sha256:" + hex.EncodeToString(d) }
