package rent

import (
	"crypto/ed25519"
	"fmt"
	"sort"
	"strings"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/nodecard"
)

// Cards is how the pool treats node cards (pkg/nodecard): the operator's
// word on what each node is, where the node's announcement is only the
// node's own. A node that announces more than its card is held to its
// card; with Require, a node without a valid card holds nothing.
type Cards struct {
	// Key is the operator's card key: only a card it signed is one. Nil:
	// cards are not read, and every node is held to what it announces.
	Key ed25519.PublicKey
	// Require holds nothing on a node that presents no valid card.
	Require bool
}

// holdToCard holds node n, just announced by e, to the capacity and
// isolation of its card, when the pool reads cards: the smaller of what
// it announced and what its card says, dimension by dimension; none at
// all, where cards are required and it presents no valid one. It notes
// on n what it did, for why and the operator's log.
func holdToCard(n *node, e *events.NodeAnnounced, cards Cards) {
	n.card = ""
	if cards.Key == nil {
		return
	}
	var reason string
	if e.Card == nil {
		reason = "it presents no card"
	} else if _, err := nodecard.VerifyCard(*e.Card, cards.Key, e.Node); err != nil {
		reason = err.Error()
	}
	if reason != "" {
		if cards.Require {
			// The node is not live: it holds nothing and counts for
			// nothing, until it announces itself with a valid card.
			n.cap = res{}
			n.card = "holds nothing: " + reason + ", and RENT requires a card the operator signed (--require-node-cards)"
		}
		return
	}
	c := e.Card
	card := resOf(c.CPU, c.MemoryBytes, c.GPU, c.DiskBytes)
	if over := n.cap.overNames(card); len(over) > 0 {
		n.card = fmt.Sprintf("held to its card: it announced more %s than the card the operator signed", strings.Join(over, ", "))
	}
	n.cap = res{min(n.cap.milliCPU, card.milliCPU), min(n.cap.memory, card.memory), min(n.cap.gpu, card.gpu), min(n.cap.disk, card.disk)}
	if c.Isolation == events.IsolationNone && e.Isolation != events.IsolationNone {
		// The operator vouches for no isolation: the node's word that it
		// isolates does not stand.
		n.unisolated = !e.AllowUnisolated
		n.card += "; its card says isolation none"
	}
}

// overNames names the dimensions in which a exceeds b.
func (a res) overNames(b res) []string {
	var out []string
	for _, d := range []struct {
		name string
		over bool
	}{{"cpu", a.milliCPU > b.milliCPU}, {"memory", a.memory > b.memory}, {"gpu", a.gpu > b.gpu}, {"disk", a.disk > b.disk}} {
		if d.over {
			out = append(out, d.name)
		}
	}
	return out
}

// CardNote is what the pool made of node's card, "" if nothing: held to
// its card, or holding nothing for want of one.
func (p *Pool) CardNote(node string) string {
	if n := p.nodes.all[node]; n != nil {
		return n.card
	}
	return ""
}

// uncardedNote names the nodes that hold nothing for want of a valid
// card; "" if there are none.
func (ns *nodeSet) uncardedNote() string {
	var names []string
	for _, n := range ns.all {
		if !n.expired && strings.HasPrefix(n.card, "holds nothing") {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return fmt.Sprintf("%s present%s no card the operator signed and so hold%s nothing", strings.Join(names, ", "),
		plural(len(names), "s", ""), plural(len(names), "s", ""))
}

// noteCard tells the operator's log what the pool made of a node's card
// as it announces itself, once the pool follows the log live (a rebuild
// would tell it again for every announcement of the history).
func (s *Service) noteCard(env events.Envelope) {
	ann, ok := env.Event.(*events.NodeAnnounced)
	if !ok || !s.tail.Live() {
		return
	}
	s.mu.Lock()
	note := s.pool.CardNote(ann.Node)
	s.mu.Unlock()
	switch {
	case strings.HasPrefix(note, "holds nothing"):
		s.log.Warn("node refused: "+note, "node", ann.Node, "seq", env.Seq)
	case note != "":
		s.log.Warn("node "+note, "node", ann.Node, "seq", env.Seq)
	}
}

// readCards sets Pool.Cards from NodeCardsKey and RequireNodeCards.
func (c *Config) readCards() error {
	if c.NodeCardsKey != "" {
		key, err := nodecard.ReadPublic(c.NodeCardsKey)
		if err != nil {
			return fmt.Errorf("rent: node cards key: %w", err)
		}
		c.Pool.Cards.Key = key
	}
	c.Pool.Cards.Require = c.Pool.Cards.Require || c.RequireNodeCards
	if c.Pool.Cards.Require && c.Pool.Cards.Key == nil {
		return fmt.Errorf("rent: node cards are required, but no card key was given to check them with (--node-cards-key)")
	}
	return nil
}
