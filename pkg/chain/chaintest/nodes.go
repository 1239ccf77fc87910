package chaintest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// NodeKey is one key of the node vectors: its seed and public key.
type NodeKey struct {
	Name    string `json:"name"`
	SeedHex string `json:"seed_hex"`
	Public  string `json:"public"`
}

// Card is one card of the node vectors, as JSON (so that each
// implementation reads it its own way), with its canonical bytes.
type Card struct {
	Why          string          `json:"why"`
	Card         json.RawMessage `json:"card"`
	CanonicalHex string          `json:"canonical_hex"`
}

// Stop is one stop of the node vectors: its job, its body as stored
// without a signature, its canonical bytes, which key signed it and the
// signature.
type Stop struct {
	Why          string `json:"why"`
	Job          string `json:"job"`
	Body         string `json:"body"`
	Signer       string `json:"signer"`
	CanonicalHex string `json:"canonical_hex"`
	Signature    string `json:"signature"`
}

// NodeVectors is testdata/nodes.json: the vectors of pkg/chain/NODES.md.
type NodeVectors struct {
	Versions []string  `json:"versions"`
	Keys     []NodeKey `json:"keys"`
	Cards    []Card    `json:"cards"`
	Stops    []Stop    `json:"stops"`
}

// Key is the key of the vectors named name, or fails t.
func (v NodeVectors) Key(t testing.TB, name string) NodeKey {
	t.Helper()
	for _, k := range v.Keys {
		if k.Name == name {
			return k
		}
	}
	t.Fatalf("chaintest: no key %q in the node vectors", name)
	return NodeKey{}
}

// LoadNodes reads the node vectors, failing t if they cannot be read or
// hold no card or stop.
func LoadNodes(t testing.TB) NodeVectors {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("chaintest: cannot tell where the vectors are")
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "testdata", "nodes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v NodeVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("chaintest: %v", err)
	}
	if len(v.Cards) == 0 || len(v.Stops) == 0 || len(v.Keys) == 0 {
		t.Fatal("chaintest: no node vectors")
	}
	return v
}
