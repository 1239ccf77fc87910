package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"strings"

	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/hold"
)

// This file implements pkg/chain/SPEC.md, written from that text and not
// from the ledger's code (services/ledger/digest.go): the two are tested
// against the same golden vectors (pkg/chain/testdata), computed from the
// text alone. Two implementations that agree with a third are evidence that
// the ledger's record of the log is right; one shared function would only
// agree with itself.

// Digest is the event digest of one stored message: the SHA-256 of its
// canonical bytes (SPEC.md, "Event digest"). Everything before the body is
// laid out in a buffer on the stack, and the body is hashed where it lies.
func Digest(m Raw) [32]byte {
	// Most messages fit the buffer whole, and are hashed in one call that
	// allocates nothing: the audit takes a digest of every message.
	var buf [2048]byte
	b := head(buf[:0], m)
	if len(b)+len(m.Body) <= len(buf) {
		return sha256.Sum256(append(b, m.Body...))
	}
	h := sha256.New()
	h.Write(b)
	h.Write(m.Body)
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// writeCanonical writes m's canonical bytes to w, for a test to compare
// with the golden vectors' canonical_hex.
func writeCanonical(w io.Writer, m Raw) {
	_, _ = w.Write(head(nil, m))
	_, _ = w.Write(m.Body)
}

// head appends to b the canonical bytes of m up to the body's own bytes,
// in the order SPEC.md lists them: the version line, u64(sequence),
// str(subject), u32(how many headers are kept) and each of them, and
// u32(the body's length).
func head(b []byte, m Raw) []byte {
	b = append(b, chain.Version+"\n"...)
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	b = str(b, m.Subject)
	var kept [16]header
	hs := attributes(kept[:0], m.Headers)
	b = binary.BigEndian.AppendUint32(b, uint32(len(hs)))
	for _, h := range hs {
		b = str(b, h.name)
		b = binary.BigEndian.AppendUint32(b, uint32(len(h.values)))
		for _, v := range h.values {
			b = str(b, v)
		}
	}
	return binary.BigEndian.AppendUint32(b, uint32(len(m.Body)))
}

// str appends a string as SPEC.md writes one: u32(its length), its bytes.
func str(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

// header is one header the digest keeps, with its values as stored.
type header struct {
	name   string
	values []string
}

// attributes appends to kept the headers the digest keeps, sorted by name
// as bytes: the CloudEvents attributes ("ce-" anything, in any case) and
// content-type, written as stored. The audit digests every message: the
// values are taken as the map is walked rather than looked up again, and
// the handful of names are sorted by insertion, in place.
func attributes(kept []header, headers map[string][]string) []header {
	for name, values := range headers {
		// Both kinds start with a c: most other names (Nats-Msg-Id, on
		// every message) are passed over without comparing further, and
		// compared without folding the name into a copy.
		if name == "" || name[0]|0x20 != 'c' {
			continue
		}
		ce := len(name) >= len("ce-") && strings.EqualFold(name[:len("ce-")], "ce-")
		if !ce && !strings.EqualFold(name, "content-type") {
			continue
		}
		// Go compares strings bytewise, which is what the spec asks.
		i := len(kept)
		kept = append(kept, header{})
		for ; i > 0 && kept[i-1].name > name; i-- {
			kept[i] = kept[i-1]
		}
		kept[i] = header{name, values}
	}
	return kept
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
	var link [64]byte
	copy(link[:32], c.value[:])
	copy(link[32:], d[:])
	c.value = sha256.Sum256(link[:])
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

// eventsDigest is a record's events_digest (SPEC.md), over the event
// digests it lists: what a record kept after its job ended shows once an
// event is listed after the end.
func eventsDigest(refs []hold.EventRef) string {
	sum := sha256.New()
	for _, r := range refs {
		d, err := hex.DecodeString(strings.TrimPrefix(r.Digest, "sha256:"))
		if err != nil {
			continue // the audit writes every digest it lists
		}
		sum.Write(d)
	}
	return digestText(sum.Sum(nil))
}
