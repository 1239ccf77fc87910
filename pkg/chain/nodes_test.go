package chain_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/chain/chaintest"
)

// TestNodeVectorsSignAsWritten checks the signing half of the node vectors
// with nothing but crypto/ed25519: each public key is its seed's, each
// card's and each stop's signature is the one its key makes over its
// canonical bytes (ed25519 is deterministic), and each canonical form opens
// with its version. The canonical bytes themselves are checked by the two
// implementations' tests (pkg/nodecard, pkg/audit).
func TestNodeVectorsSignAsWritten(t *testing.T) {
	t.Parallel()
	v := chaintest.LoadNodes(t)
	seeds := map[string]ed25519.PrivateKey{}
	for _, k := range v.Keys {
		seed, err := hex.DecodeString(k.SeedHex)
		if err != nil || len(seed) != ed25519.SeedSize {
			t.Fatalf("key %s: seed %q", k.Name, k.SeedHex)
		}
		priv := ed25519.NewKeyFromSeed(seed)
		if got := "ed25519:" + base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)); got != k.Public {
			t.Errorf("key %s: public %s, file says %s", k.Name, got, k.Public)
		}
		seeds[k.Name] = priv
	}
	sign := func(name string, canonHex string) string {
		c, err := hex.DecodeString(canonHex)
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(ed25519.Sign(seeds[name], c))
	}
	for _, c := range v.Cards {
		if !strings.HasPrefix(c.CanonicalHex, hex.EncodeToString([]byte("e31.card.v1\n"))) {
			t.Errorf("card (%s): canonical bytes do not open with e31.card.v1", c.Why)
		}
		if got := sign("operator", c.CanonicalHex); !bytes.Contains(c.Card, []byte(`"signature": "`+got+`"`)) {
			t.Errorf("card (%s): the operator signs %s, not what the card says", c.Why, got)
		}
	}
	for _, s := range v.Stops {
		if !strings.HasPrefix(s.CanonicalHex, hex.EncodeToString([]byte("e31.stop.v1\n"))) {
			t.Errorf("stop (%s): canonical bytes do not open with e31.stop.v1", s.Why)
		}
		if got := sign(s.Signer, s.CanonicalHex); got != s.Signature {
			t.Errorf("stop (%s): %s signs %s, file says %s", s.Why, s.Signer, got, s.Signature)
		}
	}
}
