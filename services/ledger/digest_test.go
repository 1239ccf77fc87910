package ledger

import (
	"encoding/base64"
	"testing"

	"github.com/e31net/e31/pkg/chain/chaintest"

	"github.com/nats-io/nats.go"
)

// TestGoldenVectors checks the ledger's digest and chain against the golden
// vectors of pkg/chain/SPEC.md, which the audit's are checked against too.
func TestGoldenVectors(t *testing.T) {
	t.Parallel()
	v := chaintest.Load(t)
	var c hashChain
	for _, m := range v.Messages {
		body, err := base64.StdEncoding.DecodeString(m.BodyBase64)
		if err != nil {
			t.Fatal(err)
		}
		d := eventDigest(m.Seq, m.Subject, nats.Header(m.Headers), body)
		if got := sha256Text(d[:]); got != m.Digest {
			t.Errorf("#%d (%s): digest %s, want %s", m.Seq, m.Why, got, m.Digest)
		}
		c.add(m.Seq, d)
		if got := c.head().String(); got != m.Head {
			t.Errorf("#%d (%s): head %s, want %s", m.Seq, m.Why, got, m.Head)
		}
	}
}
