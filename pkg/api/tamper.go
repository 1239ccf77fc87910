package api

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DigestVersion opens the canonical bytes of every event digest. It is the
// version of the definitions below, which are part of the public interface:
// the ledger computes them, `e31 audit` computes them again with code of its
// own, and anyone else may, from a copy of the log.
//
// # Event digest
//
// The digest of one stored message is the SHA-256 of its canonical bytes:
//
//	"e31.event.v1\n"
//	u64(stream sequence)
//	str(NATS subject)
//	u32(number of headers kept), then for each, sorted by name (bytewise):
//	    str(name) u32(number of values) str(value)...   (values in stored order)
//	str(body)
//
// where u64 and u32 are big-endian unsigned integers, str(x) is u32(len(x))
// followed by the bytes of x, and the headers kept are the CloudEvents
// attributes in binary mode: every header whose name, in lower case, begins
// with "ce-", and "content-type" (CloudEvents' datacontenttype), with their
// names as stored. Transport headers (Nats-Msg-Id, expected-sequence
// headers) are left out: they say how the message was published, not what
// it says. Every message of the stream has a digest, including one that
// does not decode as an event: a message nobody can read must not escape
// the chain.
//
// A hold record shows each event's digest as "sha256:<hex>" in
// events[].digest, and events_digest is "sha256:<hex>" of the SHA-256 over
// the 32-byte event digests of its events, in order.
//
// # Hash chain
//
// The chain runs over every message of the stream in stream order:
//
//	H_0 = 32 zero bytes
//	H_n = SHA-256(H_{n-1} ‖ digest_n)
//
// where digest_n is the event digest of the n-th message read (its stream
// sequence is inside the digest, so a removed message changes every later
// H). The head after the message with sequence S is written "S:<hex of H>".
// Whoever keeps a head outside the system can later prove that nothing at
// or before S was changed, removed or inserted: recompute the chain from
// the first message, and it must pass through that hash at S
// (`e31 audit --since-head S:HASH`).
const DigestVersion = "e31.event.v1"

// Head is the hash chain's value after the message with sequence Seq.
type Head struct {
	Seq uint64 `json:"seq"`
	// Hash is the hex SHA-256 chain value; empty for an empty log.
	Hash string `json:"hash"`
}

// String is the form `e31 ledger --head` prints and `e31 audit
// --since-head` reads: "SEQ:HASH".
func (h Head) String() string { return strconv.FormatUint(h.Seq, 10) + ":" + h.Hash }

// ErrHead is returned by ParseHead for text that is not a head.
var ErrHead = errors.New("api: a chain head is SEQ:HASH, a stream sequence and 64 hex digits")

// ParseHead reads "SEQ:HASH" (HASH may carry a "sha256:" prefix).
func ParseHead(s string) (Head, error) {
	seq, hash, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return Head{}, fmt.Errorf("%w: got %q", ErrHead, s)
	}
	hash = strings.ToLower(strings.TrimPrefix(hash, "sha256:"))
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil || n == 0 {
		return Head{}, fmt.Errorf("%w: %q is not a sequence", ErrHead, seq)
	}
	if b, err := hex.DecodeString(hash); err != nil || len(b) != 32 {
		return Head{}, fmt.Errorf("%w: %q is not a SHA-256 in hex", ErrHead, hash)
	}
	return Head{Seq: n, Hash: hash}, nil
}
