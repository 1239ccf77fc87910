package nodecard_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/chain/chaintest"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/nodecard"
)

// keyOf is the vectors' key called name.
func keyOf(t *testing.T, v chaintest.NodeVectors, name string) ed25519.PrivateKey {
	t.Helper()
	seed, err := hex.DecodeString(v.Key(t, name).SeedHex)
	if err != nil {
		t.Fatal(err)
	}
	return ed25519.NewKeyFromSeed(seed)
}

// TestGoldenVectors checks the canonical bytes, the card checks and the
// stop signatures against pkg/chain/NODES.md's golden vectors, which the
// audit's own implementation is checked against too.
func TestGoldenVectors(t *testing.T) {
	t.Parallel()
	v := chaintest.LoadNodes(t)
	operator := keyOf(t, v, "operator")
	for _, c := range v.Cards {
		var card events.NodeCard
		if err := json.Unmarshal(c.Card, &card); err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(nodecard.CardBytes(card)); got != c.CanonicalHex {
			t.Errorf("card (%s): canonical bytes\n%s\nwant\n%s", c.Why, got, c.CanonicalHex)
		}
		key, err := nodecard.VerifyCard(card, operator.Public().(ed25519.PublicKey), card.Node)
		if err != nil {
			t.Errorf("card (%s): %v", c.Why, err)
		} else if nodecard.KeyText(key) != v.Key(t, card.Node).Public {
			t.Errorf("card (%s): binds %s, not %s's key", c.Why, nodecard.KeyText(key), card.Node)
		}
	}
	for _, s := range v.Stops {
		var stop events.RunStopped
		if err := json.Unmarshal([]byte(s.Body), &stop); err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(nodecard.StopBytes(s.Job, &stop)); got != s.CanonicalHex {
			t.Errorf("stop (%s): canonical bytes\n%s\nwant\n%s", s.Why, got, s.CanonicalHex)
		}
		signer := keyOf(t, v, s.Signer)
		nodecard.SignStop(signer, s.Job, &stop)
		if stop.Signature != s.Signature || stop.SigningKey != v.Key(t, s.Signer).Public {
			t.Errorf("stop (%s): signed %s by %s, want %s by %s", s.Why, stop.Signature, stop.SigningKey, s.Signature, v.Key(t, s.Signer).Public)
		}
		if err := nodecard.VerifyStop(s.Job, &stop, signer.Public().(ed25519.PublicKey)); err != nil {
			t.Errorf("stop (%s): %v", s.Why, err)
		}
	}
}

func stopOf(t *testing.T) events.RunStopped {
	t.Helper()
	v := chaintest.LoadNodes(t)
	var s events.RunStopped
	if err := json.Unmarshal([]byte(v.Stops[0].Body), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTamperedStop changes one field at a time of a signed stop: each
// change is told, as is a stop signed by another node's key, and one
// unsigned.
func TestTamperedStop(t *testing.T) {
	t.Parallel()
	node, err := nodecard.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := nodecard.NewKey()
	pub := node.Public().(ed25519.PublicKey)
	seven := 7
	for name, change := range map[string]func(j *string, s *events.RunStopped){
		"job":            func(j *string, s *events.RunStopped) { *j = "another-job" },
		"attempt":        func(j *string, s *events.RunStopped) { s.Attempt = 2 },
		"node":           func(j *string, s *events.RunStopped) { s.Node = "node-2" },
		"held cpu":       func(j *string, s *events.RunStopped) { s.CPU = 2 },
		"outcome":        func(j *string, s *events.RunStopped) { s.Outcome = events.Failed },
		"exit code":      func(j *string, s *events.RunStopped) { s.ExitCode = &seven },
		"no exit code":   func(j *string, s *events.RunStopped) { s.ExitCode = nil },
		"reason":         func(j *string, s *events.RunStopped) { s.Reason = "made up" },
		"cpu seconds":    func(j *string, s *events.RunStopped) { s.Usage.CPUSeconds = 86400 },
		"max rss":        func(j *string, s *events.RunStopped) { s.Usage.MaxRSSBytes++ },
		"file digest":    func(j *string, s *events.RunStopped) { s.Output.Files[0].Digest = "sha256:" + strings.Repeat("00", 32) },
		"file added":     func(j *string, s *events.RunStopped) { s.Output.Files = append(s.Output.Files, s.Output.Files[0]) },
		"missing":        func(j *string, s *events.RunStopped) { s.Output.Missing = []string{"x"} },
		"output bytes":   func(j *string, s *events.RunStopped) { s.Output.Bytes = 0 },
		"required":       func(j *string, s *events.RunStopped) { s.Output.Declared[0].Required = false },
		"manifest":       func(j *string, s *events.RunStopped) { s.Output.Manifest = "" },
		"count":          func(j *string, s *events.RunStopped) { s.Output.Count = 9 },
		"logs":           func(j *string, s *events.RunStopped) { s.Logs = nil },
		"logs truncated": func(j *string, s *events.RunStopped) { s.Logs.Truncated = true },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, job := stopOf(t), "job-1"
			nodecard.SignStop(node, job, &s)
			if err := nodecard.VerifyStop(job, &s, pub); err != nil {
				t.Fatalf("before the change: %v", err)
			}
			change(&job, &s)
			if err := nodecard.VerifyStop(job, &s, pub); !errors.Is(err, nodecard.ErrStop) {
				t.Errorf("after changing the %s: %v, want ErrStop", name, err)
			}
		})
	}
	t.Run("another node's key", func(t *testing.T) {
		t.Parallel()
		s := stopOf(t)
		nodecard.SignStop(other, "job-1", &s)
		if err := nodecard.VerifyStop("job-1", &s, pub); err == nil || !strings.Contains(err.Error(), "not the node's key") {
			t.Errorf("signed by another key: %v", err)
		}
		// Naming the node's key does not help: the signature is not its.
		s.SigningKey = nodecard.KeyText(pub)
		if err := nodecard.VerifyStop("job-1", &s, pub); err == nil || !strings.Contains(err.Error(), "does not verify") {
			t.Errorf("signed by another key that names the node's: %v", err)
		}
	})
	t.Run("unsigned", func(t *testing.T) {
		t.Parallel()
		s := stopOf(t)
		if err := nodecard.VerifyStop("job-1", &s, pub); err == nil || !strings.Contains(err.Error(), "unsigned") {
			t.Errorf("unsigned: %v", err)
		}
	})
}

// TestCard issues a card and refuses it for another node, from another
// issuer, and with any field changed.
func TestCard(t *testing.T) {
	t.Parallel()
	operator, _ := nodecard.NewKey()
	stranger, _ := nodecard.NewKey()
	node, _ := nodecard.NewKey()
	trusted := operator.Public().(ed25519.PublicKey)
	at := time.Date(2026, 12, 2, 12, 0, 0, 750_000_000, time.UTC)
	card := nodecard.Issue(operator, events.NodeCard{Node: "node-1", CPU: 2, MemoryBytes: 4 << 30, DiskBytes: 10 << 30,
		Isolation: events.IsolationSandbox, Key: nodecard.PublicOf(node)}, at)
	if !card.IssuedAt.Equal(at.Truncate(time.Second)) {
		t.Errorf("issued at %s, want whole seconds", card.IssuedAt)
	}
	key, err := nodecard.VerifyCard(card, trusted, "node-1")
	if err != nil || !key.Equal(node.Public()) {
		t.Fatalf("the card: key %v, %v", key, err)
	}
	for name, change := range map[string]func(c *events.NodeCard){
		"cpu":       func(c *events.NodeCard) { c.CPU = 64 },
		"memory":    func(c *events.NodeCard) { c.MemoryBytes <<= 1 },
		"gpu":       func(c *events.NodeCard) { c.GPU = 8 },
		"disk":      func(c *events.NodeCard) { c.DiskBytes++ },
		"isolation": func(c *events.NodeCard) { c.Isolation = events.IsolationContainer },
		"key":       func(c *events.NodeCard) { c.Key = nodecard.PublicOf(stranger) },
		"issued at": func(c *events.NodeCard) { c.IssuedAt = c.IssuedAt.Add(time.Hour) },
		"node":      func(c *events.NodeCard) { c.Node = "node-2" },
	} {
		c := card
		change(&c)
		if _, err := nodecard.VerifyCard(c, trusted, c.Node); !errors.Is(err, nodecard.ErrCard) {
			t.Errorf("a card whose %s changed: %v, want ErrCard", name, err)
		}
	}
	if _, err := nodecard.VerifyCard(card, trusted, "node-2"); err == nil || !strings.Contains(err.Error(), "not node-2's") {
		t.Errorf("node-1's card presented by node-2: %v", err)
	}
	forged := nodecard.Issue(stranger, events.NodeCard{Node: "node-1", CPU: 64, Key: nodecard.PublicOf(node)}, at)
	if _, err := nodecard.VerifyCard(forged, trusted, "node-1"); err == nil || !strings.Contains(err.Error(), "not by the operator's card key") {
		t.Errorf("a card signed by a stranger: %v", err)
	}
	forged.Issuer = card.Issuer
	if _, err := nodecard.VerifyCard(forged, trusted, "node-1"); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("a card signed by a stranger naming the operator: %v", err)
	}
}

// TestFiles writes and reads back keys and cards.
func TestFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, _ := nodecard.NewKey()
	if err := nodecard.WriteKey(filepath.Join(dir, nodecard.KeyFile), key); err != nil {
		t.Fatal(err)
	}
	got, err := nodecard.ReadKey(filepath.Join(dir, nodecard.KeyFile))
	if err != nil || !got.Equal(key) {
		t.Fatalf("read back %v, %v", got, err)
	}
	card := nodecard.Issue(key, events.NodeCard{Node: "n", CPU: 1, Key: nodecard.PublicOf(key)}, time.Now())
	if err := nodecard.WriteCard(filepath.Join(dir, nodecard.CardFile), card); err != nil {
		t.Fatal(err)
	}
	back, err := nodecard.ReadCard(filepath.Join(dir, nodecard.CardFile))
	if err != nil || back.Signature != card.Signature || !back.IssuedAt.Equal(card.IssuedAt) {
		t.Fatalf("card read back %+v, %v", back, err)
	}
	if _, err := nodecard.VerifyCard(back, key.Public().(ed25519.PublicKey), "n"); err != nil {
		t.Errorf("the card read back: %v", err)
	}
	pub, err := nodecard.ReadPublic(nodecard.PublicOf(key))
	if err != nil || !pub.Equal(key.Public()) {
		t.Errorf("ReadPublic of the text: %v, %v", pub, err)
	}
	for _, bad := range []string{"ed25519:", "ed25519:AAAA", "x25519:" + strings.Repeat("A", 43) + "="} {
		if _, err := nodecard.ParseKey(bad); !errors.Is(err, nodecard.ErrKey) {
			t.Errorf("ParseKey(%q): %v", bad, err)
		}
	}
}
