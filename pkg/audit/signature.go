package audit

import (
	"cmp"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/e31net/e31/pkg/events"
)

// Signed by the node that measured it (pkg/chain/NODES.md). The audit
// checks, with code of its own written from that text and held to its
// golden vectors (not pkg/nodecard, which RUN signs and RENT checks
// with):
//
//   - each card a node presents in NodeAnnounced, against the operator's
//     card key when the auditor is given it (Options.CardsKey): a card
//     another key signed, or that names another node, or whose fields
//     were changed, is a finding, and binds no key;
//   - each RunStopped, against the key of the card the node held when
//     the attempt was held: a stop whose fields were changed after the
//     node signed it, one signed with another key, or an unsigned one
//     from a node that had a card, is a finding. A stop of a node without
//     a card is unsigned, as every stop before cards; no finding.
//
// The stop's own signature is checked against the key it names as it is
// decoded, on every core (stopCheck); whether that key is the card's is
// checked in log order (checkStop).

// stopCheck is what a stop's signature says by itself, decoded.
type stopCheck struct {
	signed bool
	key    string // the key it names
	valid  bool   // the signature verifies with that key over the stop
}

// keyPrefix opens a public key's text (NODES.md).
const keyPrefix = "ed25519:"

// parseKey reads a public key's text.
func parseKey(s string) (ed25519.PublicKey, bool) {
	rest, ok := strings.CutPrefix(s, keyPrefix)
	if !ok {
		return nil, false
	}
	b, err := base64.StdEncoding.Strict().DecodeString(rest)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, false
	}
	return b, true
}

// verify reports whether sig (base64) is key's (text) over msg.
func verify(keyText, sig string, msg []byte) bool {
	key, ok := parseKey(keyText)
	if !ok {
		return false
	}
	b, err := base64.StdEncoding.Strict().DecodeString(sig)
	return err == nil && ed25519.Verify(key, msg, b)
}

// checkStopOf checks a decoded stop of job on its own.
func checkStopOf(job string, s *events.RunStopped) stopCheck {
	if s.Signature == "" && s.SigningKey == "" {
		return stopCheck{}
	}
	return stopCheck{signed: true, key: s.SigningKey, valid: verify(s.SigningKey, s.Signature, stopBytes(job, s))}
}

// canonical writes NODES.md's canonical bytes.
type canonical []byte

func (c canonical) byte1(b bool) canonical {
	if b {
		return append(c, 1)
	}
	return append(c, 0)
}
func (c canonical) n32(n int) canonical   { return binary.BigEndian.AppendUint32(c, uint32(n)) }
func (c canonical) n64(n int64) canonical { return binary.BigEndian.AppendUint64(c, uint64(n)) }
func (c canonical) f(x float64) canonical {
	return binary.BigEndian.AppendUint64(c, math.Float64bits(x))
}
func (c canonical) s(x string) canonical   { return append(c.n32(len(x)), x...) }
func (c canonical) opt(set bool) canonical { return c.byte1(set) }

// cardBytes are a card's canonical bytes (e31.card.v1).
func cardBytes(c *events.NodeCard) []byte {
	return canonical("e31.card.v1\n").s(c.Node).f(c.CPU).n64(c.MemoryBytes).n64(int64(c.GPU)).n64(c.DiskBytes).
		s(string(c.Isolation)).s(c.Key).n64(c.IssuedAt.Unix()).s(c.Issuer)
}

// stopBytes are a stop's canonical bytes (e31.stop.v1).
func stopBytes(job string, e *events.RunStopped) []byte {
	c := canonical("e31.stop.v1\n").s(job).n64(int64(e.Attempt)).s(e.Node).f(e.CPU).n64(e.MemoryBytes).n64(int64(e.GPU)).n64(e.DiskBytes).
		s(string(e.Outcome)).opt(e.ExitCode != nil)
	if e.ExitCode != nil {
		c = c.n64(int64(*e.ExitCode))
	}
	c = c.s(e.Reason).f(e.Usage.CPUSeconds).n64(e.Usage.MaxRSSBytes).n32(len(e.Output.Files))
	for _, f := range e.Output.Files {
		c = c.s(f.Path).n64(f.Bytes).s(f.Digest).s(f.Mode)
	}
	c = c.n32(len(e.Output.Missing))
	for _, m := range e.Output.Missing {
		c = c.s(m)
	}
	c = c.n64(e.Output.Bytes).n32(len(e.Output.Declared))
	for _, d := range e.Output.Declared {
		c = c.s(d.Path).byte1(d.Required)
	}
	c = c.s(e.Output.Manifest).n64(int64(e.Output.Count)).opt(e.Logs != nil)
	if e.Logs != nil {
		c = c.n64(e.Logs.StdoutBytes).n64(e.Logs.StderrBytes).byte1(e.Logs.Truncated)
	}
	return c
}

// cardOf judges the card a node presents as it announces itself: the key
// it binds ("" for none), and what is wrong with it ("" for nothing).
// Without the operator's card key the audit cannot tell a card the
// operator signed from one the node made: it takes the card's key as
// bound, and the report says cards were not checked.
func (a *Auditor) cardOf(node string, c *events.NodeCard) (key, wrong string) {
	if c == nil {
		return "", ""
	}
	if a.opts.CardsKey == nil {
		return c.Key, ""
	}
	trusted := keyPrefix + base64.StdEncoding.EncodeToString(a.opts.CardsKey)
	switch {
	case c.Node != node:
		return "", fmt.Sprintf("node %s presents node %s's card", node, c.Node)
	case c.Issuer != trusted:
		return "", fmt.Sprintf("node %s presents a card issued by %s, not by the operator's card key %s", node, c.Issuer, trusted)
	case !verify(c.Issuer, c.Signature, cardBytes(c)):
		return "", fmt.Sprintf("node %s presents a card whose signature does not verify: a field was changed after the operator signed it", node)
	}
	if _, ok := parseKey(c.Key); !ok {
		return "", fmt.Sprintf("node %s presents a card whose key %q is not an ed25519 key", node, c.Key)
	}
	return c.Key, ""
}

// checkStop holds a stop to the key of a card its attempt's node
// presented: the one in force when the attempt was held, or the one in
// force when the stop was stored, in log order. A node that restarts
// announces itself with a new key before it reports what became of the
// attempts it held before (and may be given one between its lease and its
// announcement): either card is the operator's word that the key is that
// node's.
func (a *Auditor) checkStop(jobID string, f fact, sc stopCheck) {
	e, ok := f.ev.(*events.RunStopped)
	if !ok {
		return
	}
	h := a.holds[holdKey{jobID, e.Attempt}]
	if h == nil {
		return // the order check reports a stop of nothing held
	}
	var now string // the key of the node's card in force at the stop
	if n := a.nodes[h.node]; n != nil {
		now = n.cardKey
	}
	card := cmp.Or(h.cardKey, now)
	bad := func(format string, args ...any) {
		a.find(Finding{Job: jobID, Seq: f.seq, Kind: Signature, Detail: fmt.Sprintf("the stop of attempt %d on node %s ", e.Attempt, h.node) + fmt.Sprintf(format, args...)})
	}
	switch {
	case card == "" && !sc.signed:
		a.rep.StopsUnchecked++
	case card == "":
		// Signed by a node without a card: the key is bound to nothing
		// the operator said; the signature is checked for what it is.
		a.rep.StopsUnchecked++
		if !sc.valid {
			bad("is signed, but its signature does not verify with the key it names (%s): a field was changed after it was signed", sc.key)
		}
	case !sc.signed:
		bad("is unsigned, but the node presented a card (its key %s)", card)
	case sc.key != h.cardKey && sc.key != now:
		bad("is signed with %s, not with the key of the node's card, %s", sc.key, card)
	case !sc.valid:
		bad("does not verify with the node's key %s: a field was changed after the node signed it", sc.key)
	default:
		a.rep.StopsVerified++
	}
}
