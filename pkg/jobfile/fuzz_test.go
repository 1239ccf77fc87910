package jobfile

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// FuzzParse holds Parse to its promises on any input: it never panics; it
// fails only with an *Error whose problems each fit on one line; and what it
// accepts is, once the CLI has filled in the digests of the uploaded data, a
// spec that Validate (SUBMIT) accepts too, also after the JSON round trip it
// makes on the bus.
//
// The seed corpus is testdata/fuzz/FuzzParse; run it longer with
//
//	go test -run '^$' -fuzz FuzzParse -fuzztime 60s ./jobfile/
func FuzzParse(f *testing.F) {
	f.Add([]byte(designExample))
	f.Add([]byte("work: {command: 'echo hi > /out/x'}\nrequest: {limit: 90, cpu: 0.5, memory: 1.5GiB, disk: 2GB, gpu: 1}\noutput: [x, {path: '*.log', required: false}]\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		job, err := Parse("fuzz.yaml", src, "/fuzz")
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse failed with %T, want *Error: %v", err, err)
			}
			if job != nil {
				t.Fatalf("Parse returned a job and an error")
			}
			if len(e.Problems) == 0 {
				t.Fatalf("*Error without problems")
			}
			for _, p := range e.Problems {
				if p.File != "fuzz.yaml" || p.Message == "" || strings.ContainsAny(p.String(), "\n\r") {
					t.Fatalf("malformed problem %#v", p)
				}
			}
			return
		}

		spec := job.Spec
		spec.Data = append([]events.DataRef(nil), spec.Data...)
		for i := range spec.Data {
			d := &spec.Data[i]
			local, ok := job.Paths[i]
			if ok == (d.FromJob != "") {
				t.Fatalf("data[%d] has path %q and from_job %q: want exactly one", i, local, d.FromJob)
			}
			if ok {
				if !filepath.IsAbs(local) || filepath.Clean(local) != local {
					t.Fatalf("data[%d] path %q is not absolute and clean", i, local)
				}
				d.Digest, d.Kind = digest, KindFile
			}
		}
		if len(job.Paths) > len(spec.Data) {
			t.Fatalf("Paths %v has entries beyond the data", job.Paths)
		}
		if err := Validate(spec); err != nil {
			t.Fatalf("Parse accepted what Validate refuses:\n%v\nsource: %q", err, src)
		}

		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var back events.JobSpec
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		if !reflect.DeepEqual(back, spec) {
			t.Fatalf("spec changed on the bus:\n%#v\n%#v", spec, back)
		}
	})
}
