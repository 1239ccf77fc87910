package audit

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"testing"

	"github.com/e31net/e31/pkg/chain/chaintest"

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
