package events

import (
	"os"
	"path"
	"reflect"
	"slices"
	"testing"
)

// Every golden body is what a publisher of the contract writes: each must
// take the fast way, or the shape misses a field or a kind and the audit
// pays for the strict decoder on every event of that type.
func TestShapeVouchesForEveryGoldenBody(t *testing.T) {
	for _, typ := range slices.Sorted(slices.Values(Types())) {
		b, err := os.ReadFile(path.Join("testdata", typ+".json"))
		if err != nil {
			t.Fatal(err)
		}
		k := kinds[typ]
		if !k.shape.vouches(b) {
			t.Errorf("%s: the shape does not vouch for the golden body", typ)
			continue
		}
		fast, err := decodeBody(k, b)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		strict, err := decodeStrict(k, b)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if !reflect.DeepEqual(fast, strict) {
			t.Errorf("%s: read as %+v, the strict decoder reads %+v", typ, fast, strict)
		}
	}
}

// Bodies the strict decoder reads otherwise than a plain Unmarshal, or
// refuses, are never vouched for.
func TestShapeRefusesWhatOnlyUnmarshalTakes(t *testing.T) {
	for _, body := range []string{
		`{"reason":"x","extra":1}`,         // unknown field
		`{"Reason":"x"}`,                   // a field in another case
		`{"reason":"x","reason":"y"}`,      // twice
		`{"reason":"x"} {}`,                // trailing data
		`{"reason":"x"}]`,                  // trailing data
		`{"reason":1}`,                     // wrong kind
		`{"reason":null}`,                  // null into a string
		`{"reason":"\ud800"}`,              // lone surrogate
		"{\"reason\":\"\xff\"}",            // invalid UTF-8
		`{"reason":"x","problems":[1]}`,    // wrong kind in an array
		`{"reason":"x",}`,                  // trailing comma
		`["reason"]`,                       // not an object
		``,                                 // nothing
		`{"reason":"x","problems":["a",]}`, // trailing comma in an array
	} {
		if kinds[TypeJobRejected].shape.vouches([]byte(body)) {
			t.Errorf("vouched for %s", body)
		}
	}
	for _, body := range []string{
		`{"attempt":1.5}`, `{"attempt":1e3}`, `{"attempt":1234567890123456789}`, `{"cpu":1e400}`,
		`{"cpu":01}`, `{"cpu":-}`, `{"cpu":1.}`, `{"exit_code":true}`,
	} {
		if kinds[TypeRunStopped].shape.vouches([]byte(body)) {
			t.Errorf("vouched for %s", body)
		}
	}
}

// FuzzShapeAgreesWithStream holds the fast way of decoding a body to the
// strict decoder: whatever a body, decodeBody accepts it exactly when the
// strict decoder does, and reads the same event.
func FuzzShapeAgreesWithStream(f *testing.F) {
	types := slices.Sorted(slices.Values(Types()))
	for i, typ := range types {
		if b, err := os.ReadFile(path.Join("testdata", typ+".json")); err == nil {
			f.Add(uint8(i), b)
		}
	}
	f.Add(uint8(0), []byte(`{"submitter":"a","spec":{"work":{"command":["x"],"env":{"A":"1","A":"2"}}}}`))
	f.Add(uint8(0), []byte(`{"submitter":"a\u00e9\n","spec":{"request":{"cpu":1e-7,"memory_bytes":-0}}}`))
	f.Fuzz(func(t *testing.T, typ uint8, body []byte) {
		k := kinds[types[int(typ)%len(types)]]
		fast, ferr := decodeBody(k, body)
		strict, serr := decodeStrict(k, body)
		if (ferr == nil) != (serr == nil) {
			t.Fatalf("%s: the fast way says %v, the strict decoder %v", body, ferr, serr)
		}
		if ferr == nil && !reflect.DeepEqual(fast, strict) {
			t.Fatalf("%s: read as %+v, the strict decoder reads %+v", body, fast, strict)
		}
	})
}

// storedOn says what comparing with SubjectOf says, for every kind and the
// subjects a decoder meets: right, of another job or kind, with a tail
// or without, invalid ids.
func TestStoredOnIsSubjectOf(t *testing.T) {
	evs := []Event{
		&JobRequested{Submitter: "alice"}, &JobRequested{Submitter: "bad.id"}, &JobSubmitted{}, &JobRejected{},
		&ComputeHeld{Hold: Hold{Node: "n1"}}, &ComputeHeld{}, &RunStarted{}, &RunStopped{}, &OutputReturned{},
		&ComputeReleased{}, &CancelRequested{By: "bob"}, &CancelRequested{}, &JobCancelled{},
		&NodeAnnounced{Node: "n1"}, &NodeExpired{}, &HoldLost{}, &DeleteRequested{By: "operator"}, &Deleted{},
	}
	var subjects []string
	for _, id := range []string{"j1", "n1", "", "a.b", "-x"} {
		for _, ev := range evs {
			if s, err := SubjectOf(id, ev); err == nil {
				subjects = append(subjects, s, s+".x", s[:len(s)-1])
			}
		}
	}
	subjects = append(subjects, "", "e31.job.j1", "e31.job.j1.", "e31.job..submitted", "e31.node.j1.announced")
	for _, id := range []string{"j1", "n1", "", "a.b", "-x", "j"} {
		for _, ev := range evs {
			want, err := SubjectOf(id, ev)
			for _, subj := range subjects {
				if got := storedOn(subj, id, kinds[ev.Type()], ev); got != (err == nil && subj == want) {
					t.Errorf("storedOn(%q, %q, %T) = %v, SubjectOf gives %q, %v", subj, id, ev, got, want, err)
				}
			}
		}
	}
}

// BenchmarkDecodeBody reads the golden bodies the fast way and the strict
// way: what the shape saves on every event of a replay.
func BenchmarkDecodeBody(b *testing.B) {
	var ks []kind
	var bodies [][]byte
	for _, typ := range slices.Sorted(slices.Values(Types())) {
		body, err := os.ReadFile(path.Join("testdata", typ+".json"))
		if err != nil {
			b.Fatal(err)
		}
		ks, bodies = append(ks, kinds[typ]), append(bodies, body)
	}
	for _, way := range []struct {
		name   string
		decode func(kind, []byte) (Event, error)
	}{{"fast", decodeBody}, {"strict", decodeStrict}} {
		b.Run(way.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := way.decode(ks[i%len(ks)], bodies[i%len(ks)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
