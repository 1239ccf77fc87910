package stack

import (
	"fmt"
	"path/filepath"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/rent"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/run/gpu"
)

// A Stack is its own operator: it signs a card for each of its nodes with
// the card key of its keys directory (DIR/keys/cards.key, its public half
// cards.pub), and its RENT holds every node to its card and nothing on a
// node without one, as a deployment does (deploy/init.sh). Each start
// gives each node a new signing key: the stops signed before stay
// verifiable against the card the node announced with then.

// carded gives node its signing key and its card, for the size it is
// given, unless its Config brings its own.
func (s *Stack) carded(node *run.Config) error {
	if node.Card != nil || node.SigningKey != nil || node.CardFile != "" || node.SigningKeyFile != "" {
		return nil
	}
	gpus, err := gpusOf(*node)
	if err != nil {
		return fmt.Errorf("stack: the GPUs of %s: %w", node.Node, err)
	}
	n, err := s.keys.IssueNode(events.NodeCard{Node: node.Node, CPU: node.CPU, MemoryBytes: node.MemoryBytes,
		GPU: max(node.GPU, gpus), DiskBytes: node.DiskBytes})
	if err != nil {
		return fmt.Errorf("stack: the card of %s: %w", node.Node, err)
	}
	node.SigningKey, node.Card = n.Key, &n.Card
	return nil
}

// gpusOf counts the GPUs node will offer: it finds them as it starts, after
// its card is signed, and a card that named none would hold it to none.
func gpusOf(node run.Config) (int, error) {
	choice, err := gpu.ParseChoice(node.GPUs)
	if err != nil || choice.None {
		return 0, err
	}
	d, err := gpu.Discover(node.GPURoot)
	if err != nil {
		return 0, err
	}
	offered, _ := gpu.Choose(d, choice)
	return len(offered), nil
}

// cards is how the Stack's RENT treats node cards: checked against the
// Stack's card key, and required.
func (s *Stack) cards() rent.Cards { return rent.Cards{Key: s.keys.CardsKey(), Require: true} }

// CardsKeyFile is the public half of the Stack's card key, for
// `e31 audit --cards-key`.
func (s *Stack) CardsKeyFile() string { return filepath.Join(s.dir, "keys", auth.CardsPubFile) }
