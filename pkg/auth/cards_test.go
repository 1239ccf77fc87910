package auth_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/e31net/e31/pkg/auth"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/nodecard"
)

// TestNodeCards makes the card key with the others, keeps it across
// loads, writes its public half for RENT and auditors, and issues node
// cards that verify against it (and only for their node).
func TestNodeCards(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys, _, err := auth.InitKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := auth.LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !again.CardsKey().Equal(keys.CardsKey()) {
		t.Fatal("the card key changed when the keys were loaded again")
	}
	pub, err := nodecard.ReadPublic(filepath.Join(dir, auth.CardsPubFile))
	if err != nil || !pub.Equal(keys.CardsKey()) {
		t.Fatalf("cards.pub: %v, %v", pub, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, auth.CardsKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("cards.key: %v, %v: want only its owner to read it", fi.Mode(), err)
	}
	n, err := again.IssueNode(events.NodeCard{Node: "node-1", CPU: 2, MemoryBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	key, err := nodecard.VerifyCard(n.Card, pub, "node-1")
	if err != nil || nodecard.KeyText(key) != nodecard.PublicOf(n.Key) {
		t.Fatalf("the card: %v, %v", key, err)
	}
	if _, err := nodecard.VerifyCard(n.Card, pub, "node-2"); err == nil {
		t.Error("node-1's card verified for node-2")
	}
	out := t.TempDir()
	if err := n.WriteFiles(out); err != nil {
		t.Fatal(err)
	}
	card, err := nodecard.ReadCard(filepath.Join(out, nodecard.CardFile))
	if err != nil || card.Signature != n.Card.Signature {
		t.Fatalf("card file: %v", err)
	}
	if k, err := nodecard.ReadKey(filepath.Join(out, nodecard.KeyFile)); err != nil || !k.Equal(n.Key) {
		t.Fatalf("key file: %v", err)
	}

	// A keys directory made before cards gains a card key when loaded.
	if err := os.Remove(filepath.Join(dir, auth.CardsKeyFile)); err != nil {
		t.Fatal(err)
	}
	renewed, err := auth.LoadKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.CardsKey().Equal(keys.CardsKey()) {
		t.Error("a card key was not made anew")
	}
	if pub, err := nodecard.ReadPublic(filepath.Join(dir, auth.CardsPubFile)); err != nil || !pub.Equal(renewed.CardsKey()) {
		t.Errorf("cards.pub was not written anew: %v", err)
	}
}
