package nodecard_test

import (
	"crypto/ed25519"
	"encoding/json"
	"os"
	"testing"

	"github.com/e31net/e31/pkg/chain/chaintest"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/nodecard"
)

// TestTheGoldenBodiesAreSigned: the golden NodeAnnounced of pkg/events
// carries a card the vectors' operator key signed for node-a1, and the
// golden RunStopped is signed by the key that card names: the examples
// outside systems read show a stop that verifies.
func TestTheGoldenBodiesAreSigned(t *testing.T) {
	t.Parallel()
	v := chaintest.LoadNodes(t)
	operator, err := nodecard.ParseKey(v.Key(t, "operator").Public)
	if err != nil {
		t.Fatal(err)
	}
	read := func(file string, into any) {
		body, err := os.ReadFile("../events/testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatal(err)
		}
	}
	var ann events.NodeAnnounced
	read("e31.node.announced.v1.json", &ann)
	key, err := nodecard.VerifyCard(*ann.Card, operator, ann.Node)
	if err != nil {
		t.Fatal(err)
	}
	var stop events.RunStopped
	read("e31.job.stopped.v1.json", &stop)
	// The golden bodies tell the story of this job (pkg/events' tests).
	if err := nodecard.VerifyStop("01JC8X4Q2V5N7M3K9T6R0W1YZA", &stop, ed25519.PublicKey(key)); err != nil {
		t.Error(err)
	}
}
