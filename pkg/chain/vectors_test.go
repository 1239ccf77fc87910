package chain_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/chain/chaintest"
)

// TestVectorsHashAsWritten checks the hashing half of the vectors: each
// digest is the SHA-256 of its canonical bytes, each head links the one
// before, each record digest is over its events' digests. The canonical
// bytes themselves are checked by the two implementations' tests.
func TestVectorsHashAsWritten(t *testing.T) {
	t.Parallel()
	v := chaintest.Load(t)
	if v.Version != "e31.event.v1" || len(v.Messages) == 0 || len(v.Records) == 0 {
		t.Fatalf("vectors of version %q, %d messages, %d records", v.Version, len(v.Messages), len(v.Records))
	}
	var h [32]byte
	digests := map[uint64][]byte{}
	for _, m := range v.Messages {
		c, err := hex.DecodeString(m.CanonicalHex)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(c, []byte(v.Version+"\n")) {
			t.Errorf("#%d: canonical bytes do not open with the version", m.Seq)
		}
		body, err := base64.StdEncoding.DecodeString(m.BodyBase64)
		if err != nil || !bytes.HasSuffix(c, body) {
			t.Errorf("#%d: canonical bytes do not end with the body (%v)", m.Seq, err)
		}
		d := sha256.Sum256(c)
		if got := "sha256:" + hex.EncodeToString(d[:]); got != m.Digest {
			t.Errorf("#%d: digest %s, file says %s", m.Seq, got, m.Digest)
		}
		h = sha256.Sum256(append(h[:], d[:]...))
		if got := strconv.FormatUint(m.Seq, 10) + ":" + hex.EncodeToString(h[:]); got != m.Head {
			t.Errorf("#%d: head %s, file says %s", m.Seq, got, m.Head)
		}
		digests[m.Seq] = d[:]
	}
	for _, r := range v.Records {
		sum := sha256.New()
		for _, seq := range r.Events {
			sum.Write(digests[seq])
		}
		if got := "sha256:" + hex.EncodeToString(sum.Sum(nil)); got != r.EventsDigest {
			t.Errorf("record of %v: events_digest %s, file says %s", r.Events, got, r.EventsDigest)
		}
	}
	if !strings.HasPrefix(v.Messages[0].Digest, "sha256:") {
		t.Error("digests are written sha256:<hex>")
	}
}
