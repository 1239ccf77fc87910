package ledger

import (
	"crypto/sha256"
	"encoding/json"
	"math"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/hold"
)

// codecEntries are entries whose records reach every field of the record,
// with the values an encoder is most likely to write differently: escaped
// and invalid text, floats at the edges of their two notations, times in
// other zones and with every precision.
func codecEntries(t *testing.T) []*entry {
	t.Helper()
	b, err := os.ReadFile("testdata/full_life.json")
	if err != nil {
		t.Fatal(err)
	}
	var full hold.HoldRecord
	if err := json.Unmarshal(b, &full); err != nil {
		t.Fatal(err)
	}
	odd := full
	zone := time.FixedZone("", -(3*3600 + 30*60))
	times := []time.Time{
		time.Date(2026, 12, 2, 12, 0, 0, 1, time.UTC),
		time.Date(1999, 1, 2, 3, 4, 5, 120_000_000, zone),
		time.Date(2030, 6, 7, 8, 9, 10, 123_456_789, time.FixedZone("", 5*3600)),
	}
	odd.SubmittedAt, odd.HeldAt, odd.ReleasedAt, odd.DataDeletedAt = &times[0], &times[1], &times[2], &times[1]
	odd.Name = "<script>&\u2028\u2029\"\\\t\x01é😀\xff\xfe"
	odd.Reason = "line\nbreak \x7f \u00a0"
	odd.HeldSeconds, odd.CPUCoreSeconds, odd.MemoryGiBSeconds, odd.GPUSeconds = 1e-7, 1e21, 123456789.123456789, math.SmallestNonzeroFloat64
	odd.Usage = events.Usage{CPUSeconds: 0.000001, MaxRSSBytes: math.MaxInt64}
	odd.Request.CPU = 0.1 + 0.2
	odd.Sweep = &events.SweepPoint{ID: "s", Index: 3, Count: 7, Value: "a=1"}
	odd.Output.List = []events.OutputFile{{Path: "a/b c.txt", Bytes: 1, Digest: "sha256:00", Mode: "0755"}}
	odd.Output.DeletedAt = &times[2]
	code := -9
	odd.Attempts = append(odd.Attempts, hold.Attempt{Attempt: 2, Node: "n2", ExitCode: &code, Reason: "oom", HeldAt: &times[2],
		Held: hold.Resources{CPU: 0.5, MemoryBytes: 1, GPU: 1, DiskBytes: 2}, Logs: &events.Logs{Truncated: true}})

	d := sha256.New()
	d.Write([]byte("an event digest"))
	return []*entry{
		{Job: "j-1"},
		{Job: "count-clips-1", Owner: "alice", Made: 1, Record: &full, IDs: []string{"a", "b"}, digest: d},
		{Job: "odd-1", Made: math.MaxUint64, Record: &odd, IDs: []string{"<&>", ""}},
		{Job: "empty-1", Record: &hold.HoldRecord{Output: hold.Output{Missing: []string{}}}},
	}
}

// The bucket's entries are written with goccy/go-json: what it writes must
// read as what encoding/json wrote before, and the reverse (a bucket written
// by an older ledger is read by a newer one, and during a rolling upgrade
// the other way round). The bytes are the same but for one notation: goccy
// writes the exponent of a float under 1e-6 with two digits (1e-07 where
// encoding/json writes 1e-7), the same number.
func TestEntryCodecIsEncodingJSONs(t *testing.T) {
	for _, e := range codecEntries(t) {
		got, err := encodeEntry(e)
		if err != nil {
			t.Fatalf("%s: %v", e.Job, err)
		}
		// The entry as encoding/json writes it, the digest's state included.
		old := *e
		if e.digest != nil {
			b, _ := e.digest.(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
			old.Digest = b
		}
		want, err := json.Marshal(&old)
		if err != nil {
			t.Fatal(err)
		}
		var gotAny, wantAny any
		if err := json.Unmarshal(got, &gotAny); err != nil {
			t.Fatalf("%s: encoding/json cannot read what is written: %v\n%s", e.Job, err, got)
		}
		if err := json.Unmarshal(want, &wantAny); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotAny, wantAny) {
			t.Errorf("%s: encoded\n%s\nencoding/json writes\n%s", e.Job, got, want)
		}

		// What encoding/json wrote reads back as encoding/json reads it.
		dec, err := decodeEntry(e.Job, want)
		if err != nil {
			t.Fatalf("%s: decode what encoding/json wrote: %v", e.Job, err)
		}
		var ref entry
		if err := json.Unmarshal(want, &ref); err != nil {
			t.Fatal(err)
		}
		if e.digest != nil && (dec.digest == nil || !reflect.DeepEqual(dec.digest.Sum(nil), e.digest.Sum(nil))) {
			t.Errorf("%s: the digest's state did not read back", e.Job)
		}
		dec.digest, ref.Digest = nil, nil
		if !reflect.DeepEqual(*dec, ref) {
			t.Errorf("%s: read back as\n%+v\nencoding/json reads\n%+v", e.Job, *dec, ref)
		}
	}
}
