package auth

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/nodecard"
)

// The operator's card key, kept with the account keys: it signs each
// node's card (pkg/nodecard), which binds the node's name to its signing
// key and its capacity. Whoever holds cards.key can vouch for any node;
// cards.pub is its public half, as text, for RENT (--node-cards-key) and
// for auditors (e31 audit --cards-key), and is not secret (though kept
// 0600, as everything in the directory).
const (
	CardsKeyFile = "cards.key"
	CardsPubFile = "cards.pub"
)

// addCardsKey reads the card key, making it (and cards.pub) if the keys
// directory has none: it came after the others, and a directory made
// before gains it when it is loaded. A new key voids no credentials; only
// cards signed by a key now gone, which RENT then no longer trusts.
func (k *Keys) addCardsKey() error {
	p := filepath.Join(k.Dir, CardsKeyFile)
	key, err := nodecard.ReadKey(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if key, err = nodecard.NewKey(); err != nil {
			return fmt.Errorf("%w: create %s: %w", ErrKeys, CardsKeyFile, err)
		}
		if err := nodecard.WriteKey(p, key); err != nil {
			return fmt.Errorf("%w: %w", ErrKeys, err)
		}
	case err != nil:
		return fmt.Errorf("%w: %w", ErrKeys, err)
	}
	k.Cards = key
	pub := filepath.Join(k.Dir, CardsPubFile)
	want := nodecard.PublicOf(key) + "\n"
	if b, err := os.ReadFile(pub); err == nil && string(b) == want {
		return nil
	}
	// Not secret, but kept as every file of the directory is: copies go
	// where they are wanted.
	return writeSecret(pub, []byte(want))
}

// CardsKey is the public half of the operator's card key: what RENT and
// auditors check node cards against.
func (k *Keys) CardsKey() ed25519.PublicKey { return k.Cards.Public().(ed25519.PublicKey) }

// NodeKeys are what a run node needs to prove what it reports: its card,
// signed by the operator's card key, and the signing key the card names.
type NodeKeys struct {
	Card events.NodeCard
	Key  ed25519.PrivateKey
}

// IssueNode makes a signing key for the node card names, and signs the
// card with the card key, binding the key and the card's capacity to the
// node's name.
func (k *Keys) IssueNode(card events.NodeCard) (NodeKeys, error) {
	if !events.ValidID(card.Node) {
		return NodeKeys{}, fmt.Errorf("auth: node %q is not a valid id", card.Node)
	}
	key, err := nodecard.NewKey()
	if err != nil {
		return NodeKeys{}, err
	}
	card.Key = nodecard.PublicOf(key)
	return NodeKeys{Card: nodecard.Issue(k.Cards, card, time.Now()), Key: key}, nil
}

// WriteFiles writes the node's key and card into dir (nodecard.KeyFile,
// nodecard.CardFile), next to its credentials.
func (n NodeKeys) WriteFiles(dir string) error {
	if err := nodecard.WriteKey(filepath.Join(dir, nodecard.KeyFile), n.Key); err != nil {
		return err
	}
	return nodecard.WriteCard(filepath.Join(dir, nodecard.CardFile), n.Card)
}
