package chain

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version opens the canonical bytes of every event digest: the
// version of the definition of the event digest and the hash chain, which
// is written down in pkg/chain/SPEC.md with golden vectors beside it. The
// ledger computes them, the audit computes them again with code of its own
// written from that text, and anyone else may, from a copy of the log.
const Version = "e31.event.v1"

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
var ErrHead = errors.New("chain: a chain head is SEQ:HASH, a stream sequence and 64 hex digits")

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
