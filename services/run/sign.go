package run

import (
	"errors"
	"fmt"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/nodecard"
)

// Signed by the node that measured it. A node with a signing key signs
// every RunStopped it appends (pkg/nodecard, e31.stop.v1): its outcome, its
// usage, the digests of its output and logs, the hold it ends. With the
// card the operator signed for it, which the node presents in
// NodeAnnounced, anyone holding the operator's card key can check from a
// copy of the log that this node, and no other, said so, and that nothing
// it said was changed since. The key never leaves the node.

// readKeys reads the node's signing key and card from their files, when
// Config names them, and checks that they belong together and to the node.
func (c *Config) readKeys() error {
	if c.SigningKeyFile != "" {
		key, err := nodecard.ReadKey(c.SigningKeyFile)
		if err != nil {
			return fmt.Errorf("run: node %s: signing key: %w", c.Node, err)
		}
		c.SigningKey = key
	}
	if c.CardFile != "" {
		card, err := nodecard.ReadCard(c.CardFile)
		if err != nil {
			return fmt.Errorf("run: node %s: %w", c.Node, err)
		}
		c.Card = &card
	}
	switch {
	case c.Card == nil:
		return nil
	case c.SigningKey == nil:
		return errors.New("run: node " + c.Node + " has a card but no signing key (--signing-key): its stops could not be signed with the key the card names")
	case c.Card.Node != c.Node:
		return fmt.Errorf("run: the card is node %s's, not this node's (%s)", c.Card.Node, c.Node)
	case c.Card.Key != nodecard.PublicOf(c.SigningKey):
		return fmt.Errorf("run: node %s: the card names the key %s, not this node's signing key %s", c.Node, c.Card.Key, nodecard.PublicOf(c.SigningKey))
	}
	return nil
}

// signed signs every RunStopped of evs, stops of job, with the node's key;
// without one it leaves them unsigned, as nodes before signing did.
func (s *Service) signed(job string, evs []events.Event) []events.Event {
	if s.cfg.SigningKey == nil {
		return evs
	}
	for i, ev := range evs {
		if stop, ok := ev.(*events.RunStopped); ok {
			c := *stop
			nodecard.SignStop(s.cfg.SigningKey, job, &c)
			evs[i] = &c
		}
	}
	return evs
}
