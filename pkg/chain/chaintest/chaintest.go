// Package chaintest loads the golden vectors of the digest and chain
// (pkg/chain/SPEC.md, testdata/vectors.json), so that each implementation
// is checked against the same file without reading it its own way.
package chaintest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Message is one stored message of the vectors and what the spec makes
// of it.
type Message struct {
	Why          string              `json:"why"`
	Seq          uint64              `json:"seq"`
	Subject      string              `json:"subject"`
	Headers      map[string][]string `json:"headers"`
	BodyBase64   string              `json:"body_base64"`
	CanonicalHex string              `json:"canonical_hex"`
	Digest       string              `json:"digest"`
	Head         string              `json:"head"`
}

// Record is one record's events (by sequence) and their digest.
type Record struct {
	Events       []uint64 `json:"events"`
	EventsDigest string   `json:"events_digest"`
}

// Vectors is testdata/vectors.json.
type Vectors struct {
	Version  string    `json:"version"`
	Messages []Message `json:"messages"`
	Records  []Record  `json:"records"`
}

// Load reads the vectors, failing t if they cannot be read or hold no
// message.
func Load(t testing.TB) Vectors {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("chaintest: cannot tell where the vectors are")
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v Vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("chaintest: %v", err)
	}
	if len(v.Messages) == 0 {
		t.Fatal("chaintest: no vectors")
	}
	return v
}
