package run_test

import (
	"crypto/ed25519"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/natstest"
	"github.com/e31net/e31/pkg/nodecard"
	"github.com/e31net/e31/services/run"
	"github.com/e31net/e31/services/run/executor"
)

// TestHandleHeldSignsTheStop: a node with a signing key signs every stop
// it records, over what it says, with the key its card names; a node
// without one records them unsigned, as before.
func TestHandleHeldSignsTheStop(t *testing.T) {
	t.Parallel()
	n := startNode(t, nil)
	key, err := nodecard.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	exec, err := executor.NewProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	signer, err := run.New(n.js, run.Config{Node: "n1", CPU: 2, MemoryBytes: 1 << 30, DiskBytes: 1 << 30,
		Executor: exec, Store: n.store, Grace: time.Second, Logger: quiet, SigningKey: key})
	if err != nil {
		t.Fatal(err)
	}
	n.run = signer
	n.handleHeld(t, n.hold(t, "signed", job("echo hi > \"$E31_OUTPUT/hi.txt\"", nil, events.OutputDecl{Path: "hi.txt"})))
	_, stopped := n.log(t, "signed")
	if stopped == nil || stopped.Outcome != events.Succeeded {
		t.Fatalf("stop %+v", stopped)
	}
	if err := nodecard.VerifyStop("signed", stopped, key.Public().(ed25519.PublicKey)); err != nil {
		t.Errorf("the stop as logged: %v", err)
	}
	// A stop decided without running (a cancel first) is signed too.
	held := n.hold(t, "cancelled", job("true", nil))
	n.append(t, "cancelled", &events.CancelRequested{By: "alice"})
	n.handleHeld(t, held)
	if _, stopped := n.log(t, "cancelled"); stopped == nil || nodecard.VerifyStop("cancelled", stopped, key.Public().(ed25519.PublicKey)) != nil {
		t.Errorf("the stop of a job cancelled before it started is not signed: %+v", stopped)
	}

	unsigned := startNode(t, nil)
	unsigned.handleHeld(t, unsigned.hold(t, "plain", job("true", nil)))
	if _, stopped := unsigned.log(t, "plain"); stopped == nil || stopped.Signature != "" || stopped.SigningKey != "" {
		t.Errorf("a node without a key: %+v, want an unsigned stop", stopped)
	}
}

// TestNewChecksTheCard: a node's card must be its own and name its key;
// the key and card are read from the files `e31 creds node` writes.
func TestNewChecksTheCard(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js := srv.JetStream(t)
	operator, _ := nodecard.NewKey()
	key, _ := nodecard.NewKey()
	other, _ := nodecard.NewKey()
	dir := t.TempDir()
	card := nodecard.Issue(operator, events.NodeCard{Node: "n1", CPU: 2, Key: nodecard.PublicOf(key)}, time.Now())
	if err := nodecard.WriteKey(filepath.Join(dir, nodecard.KeyFile), key); err != nil {
		t.Fatal(err)
	}
	if err := nodecard.WriteCard(filepath.Join(dir, nodecard.CardFile), card); err != nil {
		t.Fatal(err)
	}
	base := run.Config{Node: "n1", CPU: 2, MemoryBytes: 1 << 30, ExecutorKind: run.ExecProcess, WorkDir: t.TempDir(), Logger: quiet}
	for name, tt := range map[string]struct {
		change func(*run.Config)
		want   string
	}{
		"from files": {func(c *run.Config) {
			c.SigningKeyFile, c.CardFile = filepath.Join(dir, nodecard.KeyFile), filepath.Join(dir, nodecard.CardFile)
		}, ""},
		"a card without a key": {func(c *run.Config) { c.Card = &card }, "no signing key"},
		"another node's card":  {func(c *run.Config) { c.Node, c.Card, c.SigningKey = "n2", &card, key }, "not this node's"},
		"another key's card":   {func(c *run.Config) { c.Card, c.SigningKey = &card, other }, "not this node's signing key"},
		"no such key file":     {func(c *run.Config) { c.SigningKeyFile = filepath.Join(dir, "none") }, "signing key"},
	} {
		cfg := base
		cfg.WorkDir = t.TempDir()
		tt.change(&cfg)
		_, err := run.New(js, cfg)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", name, err, tt.want)
		}
	}
}
