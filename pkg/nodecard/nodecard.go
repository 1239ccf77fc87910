// Package nodecard is what binds a run node's reports to the node: the card
// the operator signs for each node (its name, its public signing key, its
// capacity and isolation) and the node's signature on each stop it
// reports. The byte forms signed are pkg/chain/NODES.md (e31.card.v1,
// e31.stop.v1), with golden vectors beside it.
//
// Why a card rather than the node's NATS credentials: the credentials say
// who may publish, to the server, at the time of publishing; nothing of
// them is in the log. A card travels in the log (NodeAnnounced) and a
// signature with each stop, so an auditor with a copy of the log and the
// operator's public card key can tell, offline and years later, which node
// measured what, and that nobody changed it since. RENT holds a node to
// the capacity its card names, whatever the node announces.
//
// RUN signs (SignStop) and RENT checks cards (VerifyCard) with this
// package. The audit checks both with code of its own, from the written
// definition, as it does the event digest.
package nodecard

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// Files a node keeps next to its credentials, and the operator in its keys
// directory.
const (
	// KeyFile is a node's private signing key (PKCS #8, PEM).
	KeyFile = "node.key"
	// CardFile is a node's card, its JSON.
	CardFile = "node.card"
)

// keyPrefix opens a public key's text.
const keyPrefix = "ed25519:"

// ErrKey is wrapped by errors about a key's text or file.
var ErrKey = errors.New("nodecard: key")

// ErrCard is wrapped by every reason a card is not valid for a node.
var ErrCard = errors.New("nodecard: card")

// ErrStop is wrapped by every reason a stop's signature does not hold.
var ErrStop = errors.New("nodecard: stop")

// KeyText writes a public key as events carry it: "ed25519:" and the
// standard base64 of its 32 bytes.
func KeyText(pub ed25519.PublicKey) string { return keyPrefix + base64.StdEncoding.EncodeToString(pub) }

// ParseKey reads a public key written by KeyText.
func ParseKey(s string) (ed25519.PublicKey, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), keyPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: %q does not begin with %q", ErrKey, s, keyPrefix)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(rest)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: %q is not the base64 of %d bytes", ErrKey, s, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// NewKey makes a signing key.
func NewKey() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("%w: make: %w", ErrKey, err)
	}
	return priv, nil
}

// PublicOf is the public half of key, as text.
func PublicOf(key ed25519.PrivateKey) string { return KeyText(key.Public().(ed25519.PublicKey)) }

// WriteKey writes key to path as PKCS #8 PEM, readable by its owner only.
func WriteKey(path string, key ed25519.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrKey, path, err)
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// ReadKey reads a key WriteKey wrote.
func ReadKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: %s holds no PEM private key", ErrKey, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKey, path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s holds a %T, not an ed25519 key", ErrKey, path, k)
	}
	return priv, nil
}

// ReadPublic reads a public key from its text, or from a file that holds
// its text (as the operator's cards.pub does).
func ReadPublic(textOrPath string) (ed25519.PublicKey, error) {
	if strings.HasPrefix(textOrPath, keyPrefix) {
		return ParseKey(textOrPath)
	}
	b, err := os.ReadFile(textOrPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", textOrPath, err)
	}
	return k, nil
}

// writeFile writes b to path whole, through a file beside it.
func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("nodecard: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return fmt.Errorf("nodecard: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("nodecard: %w", err)
	}
	return nil
}

// WriteCard writes a card to path as its JSON.
func WriteCard(path string, c events.NodeCard) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCard, err)
	}
	return writeFile(path, append(b, '\n'), 0o644)
}

// ReadCard reads a card WriteCard wrote. It does not verify it.
func ReadCard(path string) (events.NodeCard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return events.NodeCard{}, fmt.Errorf("%w: %w", ErrCard, err)
	}
	var c events.NodeCard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return events.NodeCard{}, fmt.Errorf("%w: %s: %w", ErrCard, path, err)
	}
	return c, nil
}

// canon builds canonical bytes (pkg/chain/NODES.md).
type canon []byte

func (c canon) u8(v uint8) canon   { return append(c, v) }
func (c canon) u32(v uint32) canon { return binary.BigEndian.AppendUint32(c, v) }
func (c canon) u64(v uint64) canon { return binary.BigEndian.AppendUint64(c, v) }
func (c canon) i64(v int64) canon  { return binary.BigEndian.AppendUint64(c, uint64(v)) }
func (c canon) f64(v float64) canon {
	return binary.BigEndian.AppendUint64(c, math.Float64bits(v))
}
func (c canon) str(s string) canon { return append(c.u32(uint32(len(s))), s...) }
func (c canon) flag(b bool) canon {
	if b {
		return c.u8(1)
	}
	return c.u8(0)
}

// CardBytes are the bytes a card's issuer signs (e31.card.v1).
func CardBytes(c events.NodeCard) []byte {
	b := canon("e31.card.v1\n").str(c.Node).
		f64(c.CPU).i64(c.MemoryBytes).i64(int64(c.GPU)).i64(c.DiskBytes).
		str(string(c.Isolation)).str(c.Key).i64(c.IssuedAt.Unix()).str(c.Issuer)
	return b
}

// Issue signs a card with the operator's card key: it sets the card's
// issuer, and its time to now in whole seconds (only seconds are signed).
func Issue(signer ed25519.PrivateKey, c events.NodeCard, now time.Time) events.NodeCard {
	c.IssuedAt = now.UTC().Truncate(time.Second)
	c.Issuer = PublicOf(signer)
	c.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(signer, CardBytes(c)))
	return c
}

// VerifyCard checks that c is valid for node: signed by trusted over its
// canonical bytes, naming node and a key that parses. It returns the key.
func VerifyCard(c events.NodeCard, trusted ed25519.PublicKey, node string) (ed25519.PublicKey, error) {
	if c.Node != node {
		return nil, fmt.Errorf("%w: it is node %s's, not %s's", ErrCard, c.Node, node)
	}
	if c.Issuer != KeyText(trusted) {
		return nil, fmt.Errorf("%w: of node %s: issued by %s, not by the operator's card key %s", ErrCard, node, c.Issuer, KeyText(trusted))
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(c.Signature)
	if err != nil || !ed25519.Verify(trusted, CardBytes(c), sig) {
		return nil, fmt.Errorf("%w: of node %s: its signature does not verify with its issuer's key", ErrCard, node)
	}
	key, err := ParseKey(c.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: of node %s: %w", ErrCard, node, err)
	}
	return key, nil
}

// StopBytes are the bytes a node signs for a stop of job (e31.stop.v1):
// every field of the stop but its signature and signing key.
func StopBytes(job string, s *events.RunStopped) []byte {
	b := canon("e31.stop.v1\n").str(job).
		u64(uint64(s.Attempt)).str(s.Node).f64(s.CPU).i64(s.MemoryBytes).i64(int64(s.GPU)).i64(s.DiskBytes).
		str(string(s.Outcome))
	if s.ExitCode == nil {
		b = b.u8(0)
	} else {
		b = b.u8(1).i64(int64(*s.ExitCode))
	}
	b = b.str(s.Reason).f64(s.Usage.CPUSeconds).i64(s.Usage.MaxRSSBytes)
	o := &s.Output
	b = b.u32(uint32(len(o.Files)))
	for _, f := range o.Files {
		b = b.str(f.Path).i64(f.Bytes).str(f.Digest).str(f.Mode)
	}
	b = b.u32(uint32(len(o.Missing)))
	for _, m := range o.Missing {
		b = b.str(m)
	}
	b = b.i64(o.Bytes).u32(uint32(len(o.Declared)))
	for _, d := range o.Declared {
		b = b.str(d.Path).flag(d.Required)
	}
	b = b.str(o.Manifest).i64(int64(o.Count))
	if s.Logs == nil {
		b = b.u8(0)
	} else {
		b = b.u8(1).i64(s.Logs.StdoutBytes).i64(s.Logs.StderrBytes).flag(s.Logs.Truncated)
	}
	return b
}

// SignStop signs a stop of job with the node's key, setting its signature
// and signing key.
func SignStop(key ed25519.PrivateKey, job string, s *events.RunStopped) {
	s.Signature, s.SigningKey = "", ""
	s.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(key, StopBytes(job, s)))
	s.SigningKey = PublicOf(key)
}

// VerifyStop checks a stop of job against key, the key of the card of the
// node the attempt was held on: signed, by that key, over what it says.
func VerifyStop(job string, s *events.RunStopped, key ed25519.PublicKey) error {
	switch {
	case s.Signature == "":
		return fmt.Errorf("%w: unsigned", ErrStop)
	case s.SigningKey != KeyText(key):
		return fmt.Errorf("%w: signed with %s, not the node's key %s", ErrStop, s.SigningKey, KeyText(key))
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(s.Signature)
	if err != nil || !ed25519.Verify(key, StopBytes(job, s), sig) {
		return fmt.Errorf("%w: its signature does not verify: a field was changed after the node signed it", ErrStop)
	}
	return nil
}
