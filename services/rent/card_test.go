package rent_test

import (
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/nodecard"
	"github.com/e31net/e31/services/rent"
)

// Capacity beyond the card: a node is held to the card its operator signed.

// cardKeys are the operator's card key and a stranger's, made once.
var operatorKey, strangerKey = mustKey(), mustKey()

func mustKey() ed25519.PrivateKey {
	k, err := nodecard.NewKey()
	if err != nil {
		panic(err)
	}
	return k
}

// carded announces node with cpu cores (16 GiB, 100 GiB disk, sandbox) and
// a card signed by signer for cardNode, saying cardCPU cores and card
// isolation iso; with signer nil, no card.
func carded(node string, cpu float64, signer ed25519.PrivateKey, cardNode string, cardCPU float64, iso events.Isolation) step {
	a := &events.NodeAnnounced{Node: node, Boot: "boot-1", CPU: cpu, MemoryBytes: 16 * gib, DiskBytes: 100 * gib, Isolation: events.IsolationSandbox}
	if signer != nil {
		nodeKey := mustKey()
		c := nodecard.Issue(signer, events.NodeCard{Node: cardNode, CPU: cardCPU, MemoryBytes: 16 * gib, DiskBytes: 100 * gib,
			Isolation: iso, Key: nodecard.PublicOf(nodeKey)}, t0)
		a.Card = &c
	}
	return step{node, a}
}

func TestPoolHoldsNodesToTheirCards(t *testing.T) {
	t.Parallel()
	trusted := operatorKey.Public().(ed25519.PublicKey)
	tampered := carded("n1", 64, operatorKey, "n1", 2, "")
	tampered.ev.(*events.NodeAnnounced).Card.CPU = 64
	tests := []struct {
		name    string
		cards   rent.Cards
		log     []step
		want    []string
		why     string // in the operator's answer of why "big" waits
		cardFor string // what CardNote says of n1
	}{
		{name: "a node that announces more than its card is held to the card",
			cards: rent.Cards{Key: trusted}, log: []step{carded("n1", 64, operatorKey, "n1", 2, ""), submit("big", 4), submit("a", 2)},
			want: []string{"reject big", "hold a#1 on n1"}, cardFor: "held to its card: it announced more cpu"},
		{name: "with cards not read, a node is taken at its word",
			log:  []step{carded("n1", 64, operatorKey, "n1", 2, ""), submit("big", 4)},
			want: []string{"hold big#1 on n1"}},
		{name: "a node without a card holds nothing where cards are required",
			cards: rent.Cards{Key: trusted, Require: true}, log: []step{carded("n1", 64, nil, "", 0, ""), submit("big", 4)},
			want: []string{}, why: "n1 presents no card the operator signed", cardFor: "holds nothing: it presents no card"},
		{name: "a node without a card is taken at its word where cards are not required",
			cards: rent.Cards{Key: trusted}, log: []step{carded("n1", 64, nil, "", 0, ""), submit("big", 4)},
			want: []string{"hold big#1 on n1"}},
		{name: "another node's card is no card",
			cards: rent.Cards{Key: trusted, Require: true}, log: []step{carded("n1", 64, operatorKey, "n2", 64, ""), submit("big", 4)},
			want: []string{}, cardFor: "not n1's"},
		{name: "a card a stranger signed is no card",
			cards: rent.Cards{Key: trusted, Require: true}, log: []step{carded("n1", 64, strangerKey, "n1", 64, ""), submit("big", 4)},
			want: []string{}, cardFor: "not by the operator's card key"},
		{name: "a card whose capacity was raised after it was signed is no card",
			cards: rent.Cards{Key: trusted, Require: true}, log: []step{tampered, submit("big", 4)},
			want: []string{}, cardFor: "does not verify"},
		{name: "a card that says isolation none holds the node to none, whatever it announces",
			cards: rent.Cards{Key: trusted}, log: []step{carded("n1", 64, operatorKey, "n1", 64, events.IsolationNone), carded("n2", 1, operatorKey, "n2", 1, ""), submit("big", 4)},
			want: []string{"reject big"}, cardFor: "its card says isolation none"},
		{name: "a node that announces again with a valid card holds again",
			cards: rent.Cards{Key: trusted, Require: true},
			log:   []step{carded("n1", 64, nil, "", 0, ""), submit("big", 4), reannounceStep(carded("n1", 64, operatorKey, "n1", 8, ""))},
			want:  []string{"hold big#1 on n1"}, cardFor: "held to its card"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := rent.NewPool(rent.PoolConfig{Cards: tt.cards}, func() time.Time { return t0 })
			var h history
			applyAll(p, h.log(tt.log...))
			if got := describe(p.Decide(100)); !slices.Equal(got, tt.want) {
				t.Errorf("decided %q, want %q", got, tt.want)
			}
			if why := p.Why("big").Reason; !strings.Contains(why, tt.why) {
				t.Errorf("why big waits: %q, want it to say %q", why, tt.why)
			}
			if note := p.CardNote("n1"); !strings.Contains(note, tt.cardFor) || (tt.cardFor == "") != (note == "") {
				t.Errorf("the card of n1: %q, want %q", note, tt.cardFor)
			}
		})
	}
}

// reannounceStep is s announced under a new boot.
func reannounceStep(s step) step {
	a := *s.ev.(*events.NodeAnnounced)
	a.Boot = "boot-2"
	return step{s.subject, &a}
}

// TestRequiringCardsNeedsTheKey: RENT refuses to start asked to require
// cards it has no key to check.
func TestRequiringCardsNeedsTheKey(t *testing.T) {
	t.Parallel()
	if _, err := rent.New(nil, nil, rent.Config{RequireNodeCards: true, Logger: quiet}); err == nil || !strings.Contains(err.Error(), "--node-cards-key") {
		t.Errorf("requiring cards without a key: %v", err)
	}
	if _, err := rent.New(nil, nil, rent.Config{NodeCardsKey: "ed25519:nope", Logger: quiet}); err == nil {
		t.Error("a card key that does not parse was taken")
	}
	if _, err := rent.New(nil, nil, rent.Config{NodeCardsKey: nodecard.PublicOf(operatorKey), RequireNodeCards: true, Logger: quiet}); err != nil {
		t.Errorf("a card key: %v", err)
	}
}
