package audit

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/chain/chaintest"
	"github.com/e31net/e31/pkg/events"

	"github.com/nats-io/nats.go"
)

// TestGoldenVectors checks the audit's digest and chain against the golden
// vectors of pkg/chain/SPEC.md, which the ledger's are checked against too.
func TestGoldenVectors(t *testing.T) {
	t.Parallel()
	v := chaintest.Load(t)
	var c HashChain
	for _, m := range v.Messages {
		body, err := base64.StdEncoding.DecodeString(m.BodyBase64)
		if err != nil {
			t.Fatal(err)
		}
		raw := Raw{Seq: m.Seq, Subject: m.Subject, Headers: nats.Header(m.Headers), Body: body}
		var canon bytes.Buffer
		writeCanonical(&canon, raw)
		if got := hex.EncodeToString(canon.Bytes()); got != m.CanonicalHex {
			t.Errorf("#%d (%s): canonical bytes\n%s\nwant\n%s", m.Seq, m.Why, got, m.CanonicalHex)
		}
		d := Digest(raw)
		if got := digestText(d[:]); got != m.Digest {
			t.Errorf("#%d (%s): digest %s, want %s", m.Seq, m.Why, got, m.Digest)
		}
		c.Add(m.Seq, d)
		if got := c.Head().String(); got != m.Head {
			t.Errorf("#%d (%s): head %s, want %s", m.Seq, m.Why, got, m.Head)
		}
	}
}

// TestNodeGoldenVectors checks the audit's own canonical bytes of cards
// and stops, and its checks of their signatures, against the golden
// vectors of pkg/chain/NODES.md, which pkg/nodecard is checked against
// too.
func TestNodeGoldenVectors(t *testing.T) {
	t.Parallel()
	v := chaintest.LoadNodes(t)
	for _, c := range v.Cards {
		var card events.NodeCard
		if err := json.Unmarshal(c.Card, &card); err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(cardBytes(&card)); got != c.CanonicalHex {
			t.Errorf("card (%s): canonical bytes\n%s\nwant\n%s", c.Why, got, c.CanonicalHex)
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(v.Key(t, "operator").Public, "ed25519:"))
		if err != nil {
			t.Fatal(err)
		}
		a := New(Options{CardsKey: key})
		if bound, wrong := a.cardOf(card.Node, &card); wrong != "" || bound != v.Key(t, card.Node).Public {
			t.Errorf("card (%s): binds %q (%s)", c.Why, bound, wrong)
		}
	}
	for _, s := range v.Stops {
		var stop events.RunStopped
		if err := json.Unmarshal([]byte(s.Body), &stop); err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(stopBytes(s.Job, &stop)); got != s.CanonicalHex {
			t.Errorf("stop (%s): canonical bytes\n%s\nwant\n%s", s.Why, got, s.CanonicalHex)
		}
		stop.Signature, stop.SigningKey = s.Signature, v.Key(t, s.Signer).Public
		if c := checkStopOf(s.Job, &stop); !c.signed || !c.valid || c.key != v.Key(t, s.Signer).Public {
			t.Errorf("stop (%s): %+v", s.Why, c)
		}
	}
}
