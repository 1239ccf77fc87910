package events_test

// These tests keep three things in step: the Go event types, the JSON Schemas
// under schema/ (the contract for systems outside the project) and the golden
// bodies under testdata/ (which document the contract by example). A field
// added to a Go type and not to its schema, or the other way round, fails here.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/e31net/e31/pkg/events"
)

// goTypes is every event type with its Go type. It is written out rather than
// derived, so that a type added to the registry without a schema, a golden
// body and a line here fails TestEveryTypeHasSchemaAndGolden.
var goTypes = map[string]events.Event{
	events.TypeJobRequested:    &events.JobRequested{},
	events.TypeJobSubmitted:    &events.JobSubmitted{},
	events.TypeJobRejected:     &events.JobRejected{},
	events.TypeComputeHeld:     &events.ComputeHeld{},
	events.TypeRunStarted:      &events.RunStarted{},
	events.TypeRunStopped:      &events.RunStopped{},
	events.TypeOutputReturned:  &events.OutputReturned{},
	events.TypeComputeReleased: &events.ComputeReleased{},
	events.TypeCancelRequested: &events.CancelRequested{},
	events.TypeJobCancelled:    &events.JobCancelled{},
	events.TypeNodeAnnounced:   &events.NodeAnnounced{},
	events.TypeNodeExpired:     &events.NodeExpired{},
	events.TypeHoldLost:        &events.HoldLost{},
	events.TypeHoldExpired:     &events.HoldExpired{},
	events.TypeDeleteRequested: &events.DeleteRequested{},
	events.TypeDeleted:         &events.Deleted{},
	events.TypeDeviceWithdrawn: &events.DeviceWithdrawn{},
	events.TypeDeviceRestored:  &events.DeviceRestored{},
	events.TypeCheckpointSaved: &events.CheckpointSaved{},
}

// The golden bodies tell the story of one job on one node.
const (
	goldenJob  = "01JC8X4Q2V5N7M3K9T6R0W1YZA"
	goldenNode = "node-a1"
)

// goldenSubjects is where each golden event is stored, and goldenIDs its
// ce-id, written out by hand so that SubjectOf and ID are checked against
// what envelope.json and README.md promise outside systems.
var goldenSubjects = map[string]string{
	events.TypeJobRequested:    "e31.job." + goldenJob + ".requested.alice",
	events.TypeJobSubmitted:    "e31.job." + goldenJob + ".submitted",
	events.TypeJobRejected:     "e31.job." + goldenJob + ".rejected",
	events.TypeComputeHeld:     "e31.job." + goldenJob + ".held." + goldenNode,
	events.TypeRunStarted:      "e31.job." + goldenJob + ".started." + goldenNode,
	events.TypeRunStopped:      "e31.job." + goldenJob + ".stopped." + goldenNode,
	events.TypeOutputReturned:  "e31.job." + goldenJob + ".returned",
	events.TypeComputeReleased: "e31.job." + goldenJob + ".released",
	events.TypeCancelRequested: "e31.job." + goldenJob + ".cancel.alice",
	events.TypeJobCancelled:    "e31.job." + goldenJob + ".cancelled",
	events.TypeNodeAnnounced:   "e31.node." + goldenNode + ".announced",
	events.TypeNodeExpired:     "e31.node." + goldenNode + ".expired",
	events.TypeHoldLost:        "e31.job." + goldenJob + ".lost",
	events.TypeHoldExpired:     "e31.job." + goldenJob + ".overrun",
	events.TypeDeleteRequested: "e31.job." + goldenJob + ".delete.alice",
	events.TypeDeleted:         "e31.job." + goldenJob + ".deleted",
	events.TypeDeviceWithdrawn: "e31.node." + goldenNode + ".device_withdrawn",
	events.TypeDeviceRestored:  "e31.node." + goldenNode + ".device_restored",
	events.TypeCheckpointSaved: "e31.job." + goldenJob + ".saved." + goldenNode,
}

var goldenIDs = map[string]string{
	events.TypeJobRequested:    goldenJob + "/requested",
	events.TypeJobSubmitted:    goldenJob + "/submitted",
	events.TypeJobRejected:     goldenJob + "/rejected",
	events.TypeComputeHeld:     goldenJob + "/held/1",
	events.TypeRunStarted:      goldenJob + "/started/1",
	events.TypeRunStopped:      goldenJob + "/stopped/1",
	events.TypeOutputReturned:  goldenJob + "/returned/1",
	events.TypeComputeReleased: goldenJob + "/released/1",
	events.TypeCancelRequested: goldenJob + "/cancel",
	events.TypeJobCancelled:    goldenJob + "/cancelled",
	events.TypeNodeAnnounced:   goldenNode + "/announced/01JC8TZ4K0QH6S2N8V3M5P7R9A",
	events.TypeNodeExpired:     goldenNode + "/expired/01JC8TZ4K0QH6S2N8V3M5P7R9A",
	events.TypeHoldLost:        goldenJob + "/lost/1",
	events.TypeHoldExpired:     goldenJob + "/overrun/1",
	events.TypeDeleteRequested: goldenJob + "/delete/output",
	events.TypeDeleted:         goldenJob + "/deleted/output",
	events.TypeDeviceWithdrawn: goldenNode + "/device_withdrawn/01JC8TZ4K0QH6S2N8V3M5P7R9A.GPU-5f1c3a9e-2b7d-4e08-9c61-3d2a7b8e4f10.1",
	events.TypeDeviceRestored:  goldenNode + "/device_restored/01JC8TZ4K0QH6S2N8V3M5P7R9A.GPU-5f1c3a9e-2b7d-4e08-9c61-3d2a7b8e4f10.2",
	events.TypeCheckpointSaved: goldenJob + "/saved/1.3",
}

// goType is the Go type of an event type, or stops the test.
func goType(t testing.TB, ceType string) reflect.Type {
	t.Helper()
	ev, ok := goTypes[ceType]
	if !ok {
		t.Fatalf("%s is not in goTypes", ceType)
	}
	return reflect.TypeOf(ev).Elem()
}

// goldenSubject is the ce-subject of a golden event: the job, or the node.
func goldenSubject(ceType string) string {
	switch ceType {
	case events.TypeNodeAnnounced, events.TypeNodeExpired, events.TypeDeviceWithdrawn, events.TypeDeviceRestored:
		return goldenNode
	}
	return goldenJob
}

var goldenTime = time.Date(2025, 3, 14, 10, 26, 53, 589793238, time.FixedZone("CET", 3600))

// Files in schema/ that are not the body of an event type.
const (
	defsFile     = "defs.json"
	envelopeFile = "envelope.json"
)

// schemaSet is every schema of events.Schemas, compiled, and its raw JSON.
type schemaSet struct {
	compiled map[string]*jsonschema.Schema // by file name
	raw      map[string]map[string]any     // by file name
}

// loadSchemas compiles every schema from the embedded files, resolving $ref
// by $id among them alone: nothing is fetched from the network.
func loadSchemas(t testing.TB) *schemaSet {
	t.Helper()
	fsys := events.Schemas()
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	set := &schemaSet{compiled: map[string]*jsonschema.Schema{}, raw: map[string]map[string]any{}}
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.AddResource(events.SchemaBase+name, doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		set.raw[name] = raw
	}
	for _, name := range names {
		sch, err := c.Compile(events.SchemaBase + name)
		if err != nil {
			t.Fatalf("compile %s: %v", name, err)
		}
		set.compiled[name] = sch
	}
	return set
}

// body is the schema of the body of an event type.
func (s *schemaSet) body(t testing.TB, ceType string) *jsonschema.Schema {
	t.Helper()
	sch, ok := s.compiled[ceType+".json"]
	if !ok {
		t.Fatalf("no schema for %s", ceType)
	}
	return sch
}

// validate checks a JSON document against sch, reading numbers exactly as the
// validator expects them.
func validate(sch *jsonschema.Schema, doc []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

func readGolden(t testing.TB, ceType string) []byte {
	t.Helper()
	b, err := os.ReadFile(path.Join("testdata", ceType+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goldenHeaders are the headers of a golden event, written by hand as an
// outside producer would.
func goldenHeaders(ceType string) nats.Header {
	h := nats.Header{}
	h.Set(events.HeaderSpecVersion, "1.0")
	h.Set(events.HeaderID, goldenIDs[ceType])
	h.Set(events.HeaderType, ceType)
	h.Set(events.HeaderSource, "e31/test")
	h.Set(events.HeaderTime, goldenTime.UTC().Format(time.RFC3339Nano))
	h.Set(events.HeaderSubject, goldenSubject(ceType))
	h.Set(events.HeaderContentType, "application/json")
	h.Set(events.HeaderMsgID, goldenIDs[ceType])
	return h
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

// eventValue returns the event itself whether Decode gave a value or a pointer.
func eventValue(ev events.Event) any {
	v := reflect.ValueOf(ev)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	return v.Interface()
}

func sortedTypes() []string {
	ts := events.Types()
	sort.Strings(ts)
	return ts
}

func TestEveryTypeHasSchemaAndGolden(t *testing.T) {
	t.Parallel()
	types := sortedTypes()
	var listed []string
	for ceType, ev := range goTypes {
		listed = append(listed, ceType)
		if ev.Type() != ceType {
			t.Errorf("goTypes[%q] is a %T, whose Type is %q", ceType, ev, ev.Type())
		}
	}
	sort.Strings(listed)
	if !slices.Equal(types, listed) {
		t.Fatalf("events.Types() = %v, but this test knows %v: add the new type to goTypes, with a schema and a golden body", types, listed)
	}

	want := map[string]bool{}
	for _, ceType := range types {
		want[ceType+".json"] = true
	}
	schemaFiles, err := fs.Glob(events.Schemas(), "*.json")
	if err != nil {
		t.Fatal(err)
	}
	goldenFiles, err := fs.Glob(os.DirFS("testdata"), "*.json")
	if err != nil {
		t.Fatal(err)
	}
	for dir, files := range map[string][]string{"schema": schemaFiles, "testdata": goldenFiles} {
		have := map[string]bool{}
		for _, f := range files {
			have[f] = true
			if !want[f] && !(dir == "schema" && (f == defsFile || f == envelopeFile)) {
				t.Errorf("%s/%s is not the file of any event type in events.Types()", dir, f)
			}
		}
		for f := range want {
			if !have[f] {
				t.Errorf("%s/%s is missing", dir, f)
			}
		}
	}

	// Every schema says what it is, where it lives and which draft it follows.
	set := loadSchemas(t)
	for name, raw := range set.raw {
		if got, want := raw["$id"], events.SchemaBase+name; got != want {
			t.Errorf("%s: $id is %v, expected %s", name, got, want)
		}
		if got := raw["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema is %v, expected draft 2020-12", name, got)
		}
		for _, k := range []string{"title", "description"} {
			if s, _ := raw[k].(string); strings.TrimSpace(s) == "" {
				t.Errorf("%s: no %s", name, k)
			}
		}
		if want[name] && raw["type"] != "object" {
			t.Errorf("%s: type is %v, expected object", name, raw["type"])
		}
	}
}

// TestGolden checks each golden body: it is valid, the real decoder reads it
// strictly into its Go type, and the Go type writes it back unchanged.
func TestGolden(t *testing.T) {
	t.Parallel()
	set := loadSchemas(t)
	for _, ceType := range sortedTypes() {
		t.Run(ceType, func(t *testing.T) {
			t.Parallel()
			body := readGolden(t, ceType)
			if err := validate(set.body(t, ceType), body); err != nil {
				t.Fatalf("golden body is not valid:\n%v", err)
			}
			env, err := events.Decode(goldenSubjects[ceType], goldenHeaders(ceType), body)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := reflect.TypeOf(eventValue(env.Event)), goType(t, ceType); got != want {
				t.Fatalf("decoded a %v, expected a %v", got, want)
			}
			again, err := json.Marshal(env.Event)
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, body, again) {
				t.Errorf("decoding and encoding changed the body:\ngolden: %s\nagain:  %s", compact(t, body), again)
			}
		})
	}
}

func compact(t testing.TB, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestGoTypesMatchSchemas checks both directions. A value of each Go type with
// every field set encodes to a valid body, so the schema describes every
// field the type has (the schemas allow no other property). And every
// property of the schema is a JSON field of the type, required exactly when
// the encoder always writes it, with a matching JSON type.
func TestGoTypesMatchSchemas(t *testing.T) {
	t.Parallel()
	set := loadSchemas(t)
	for _, ceType := range sortedTypes() {
		t.Run(ceType, func(t *testing.T) {
			t.Parallel()
			sch := set.body(t, ceType)
			rt := goType(t, ceType)

			v := reflect.New(rt).Elem()
			fill(t, v, "")
			body, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			if err := validate(sch, body); err != nil {
				t.Errorf("a %v with every field set is not valid: is a field missing from the schema?\n%s\n%v", rt, body, err)
			}
			// The strict decoder reads everything the encoder writes.
			ev := v.Addr().Interface().(events.Event)
			subject := goldenSubject(ceType)
			if f := v.FieldByName("Node"); f.IsValid() && f.Kind() == reflect.String && strings.HasPrefix(ceType, "e31.node.") {
				// A node's event is about the node its body names.
				subject = f.String()
			}
			m, err := events.New(subject, ev, "e31/test", goldenTime).Msg()
			if err != nil {
				t.Fatal(err)
			}
			env, err := events.Decode(m.Subject, m.Header, m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(eventValue(env.Event), v.Interface()) {
				t.Errorf("round trip changed the event:\nsent %#v\ngot  %#v", v.Interface(), eventValue(env.Event))
			}

			checkShape(t, ceType, rt, sch, true)
		})
	}
}

// TestEmptyListsAreValid checks the bodies the Go encoder writes for events
// whose lists are empty (nil slices become null) and whose optional fields
// are absent.
func TestEmptyListsAreValid(t *testing.T) {
	t.Parallel()
	set := loadSchemas(t)
	hold := events.Hold{Attempt: 1, Node: goldenNode, CPU: 0.5, MemoryBytes: 1 << 20}
	for _, ev := range []events.Event{
		&events.RunStopped{Hold: hold, Outcome: events.LimitExceeded, Reason: "killed at the limit of 600s"},
		&events.RunStopped{Hold: hold, Outcome: events.Failed, Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}}},
		&events.OutputReturned{Hold: hold, Outcome: events.Cancelled, Partial: true},
		&events.OutputReturned{Hold: hold, Outcome: events.Succeeded},
		&events.ComputeReleased{Hold: hold, Outcome: events.NodeLost, Final: false},
		&events.JobRequested{Submitter: "bob", Spec: events.JobSpec{
			Work:    events.Work{Command: []string{"/bin/true"}},
			Request: events.Request{CPU: 0.25, MemoryBytes: 1 << 20, DiskBytes: 1 << 20, LimitSeconds: 1},
		}},
		&events.JobRejected{Reason: "request.cpu: must be more than 0"},
		&events.CancelRequested{By: "alice"},
		&events.JobCancelled{},
		&events.NodeAnnounced{Node: goldenNode, Boot: "b1", CPU: 1},
	} {
		body, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(set.body(t, ev.Type()), body); err != nil {
			t.Errorf("%s %s is not valid:\n%v", ev.Type(), body, err)
		}
	}
}

// TestSchemasRefuse checks that each schema refuses what e31 must never read:
// unknown fields, wrong types, bad ids and digests, unknown outcomes, values
// out of range and facts that contradict themselves. Each case changes one
// thing in a valid golden body; at is where the validator must object.
// decode says that events.Decode refuses the body too; the other cases are
// the schema's alone (the Go decoder checks types and names, not values).
func TestSchemasRefuse(t *testing.T) {
	t.Parallel()
	set := loadSchemas(t)
	type refusal struct {
		mutation
		at     string
		decode bool
	}
	var cases []refusal
	// An unknown field, anywhere, in every type.
	for _, ceType := range sortedTypes() {
		cases = append(cases, refusal{mutation{ceType, "/unknown_field", true}, "", true})
	}
	cases = append(cases, []refusal{
		// Unknown fields inside shared parts.
		{mutation{events.TypeJobSubmitted, "/spec/work/shell", "bash"}, "/spec/work", true},
		{mutation{events.TypeJobRequested, "/spec/request/memory", "512MiB"}, "/spec/request", true},
		{mutation{events.TypeJobSubmitted, "/spec/data/0/path", "./clips"}, "/spec/data/0", true},
		{mutation{events.TypeRunStopped, "/usage/gpu_seconds", 1}, "/usage", true},
		{mutation{events.TypeOutputReturned, "/files/0/owner", "root"}, "/files/0", true},
		// Only the execute bit of a mode is kept.
		{mutation{events.TypeOutputReturned, "/files/0/mode", "0777"}, "/files/0/mode", false},
		{mutation{events.TypeDeleted, "/what", "all"}, "/what", false},
		{mutation{events.TypeDeleteRequested, "/what", "everything"}, "/what", false},
		// Field names are case-sensitive in the contract.
		{mutation{events.TypeJobCancelled, "/Reason", "x"}, "", false},

		// Wrong JSON types.
		{mutation{events.TypeComputeHeld, "/attempt", "1"}, "/attempt", true},
		{mutation{events.TypeRunStopped, "/usage/max_rss_bytes", 1.5}, "/usage/max_rss_bytes", true},
		{mutation{events.TypeJobSubmitted, "/spec/request/cpu", "1"}, "/spec/request/cpu", true},
		{mutation{events.TypeJobSubmitted, "/spec/work/command", "/bin/sh -c true"}, "/spec/work/command", true},
		{mutation{events.TypeJobSubmitted, "/spec/work/env/LANG", 1}, "/spec/work/env/LANG", true},
		{mutation{events.TypeComputeReleased, "/final", "yes"}, "/final", true},
		{mutation{events.TypeNodeAnnounced, "/labels", []any{"zone"}}, "/labels", true},
		{mutation{events.TypeJobRequested, "/spec", nil}, "/spec", false},
		{mutation{events.TypeJobRejected, "/problems", nil}, "/problems", false},

		// Bad digests.
		{mutation{events.TypeOutputReturned, "/files/0/digest", "sha256:" + strings.Repeat("AB", 32)}, "/files/0/digest", false},
		{mutation{events.TypeRunStopped, "/output/files/0/digest", "sha256:abc"}, "/output/files/0/digest", false},
		{mutation{events.TypeJobSubmitted, "/spec/data/0/digest", "md5:d41d8cd98f00b204e9800998ecf8427e"}, "/spec/data/0/digest", false},

		// Bad outcomes.
		{mutation{events.TypeRunStopped, "/outcome", "crashed"}, "/outcome", false},
		{mutation{events.TypeOutputReturned, "/outcome", "Succeeded"}, "/outcome", false},
		{mutation{events.TypeComputeReleased, "/outcome", "rejected"}, "/outcome", false}, // never held

		// Bad ids, names and paths.
		{mutation{events.TypeComputeHeld, "/node", "node a1"}, "/node", false},
		{mutation{events.TypeComputeHeld, "/node", "-node"}, "/node", false},
		{mutation{events.TypeNodeAnnounced, "/node", strings.Repeat("n", 65)}, "/node", false},
		{mutation{events.TypeNodeAnnounced, "/boot", ""}, "/boot", false},
		{mutation{events.TypeJobSubmitted, "/spec/data/1/from_job", "../other"}, "/spec/data/1/from_job", false},
		{mutation{events.TypeJobSubmitted, "/spec/data/0/name", ".."}, "/spec/data/0/name", false},
		{mutation{events.TypeJobSubmitted, "/spec/data/0/name", "a/b"}, "/spec/data/0/name", false},
		{mutation{events.TypeJobSubmitted, "/spec/data/0/kind", "link"}, "/spec/data/0/kind", false},
		{mutation{events.TypeJobSubmitted, "/spec/output/0/path", "/out/count.txt"}, "/spec/output/0/path", false},
		{mutation{events.TypeJobSubmitted, "/spec/output/0/path", "../count.txt"}, "/spec/output/0/path", false},
		{mutation{events.TypeOutputReturned, "/files/0/path", "a//b"}, "/files/0/path", false},
		{mutation{events.TypeOutputReturned, "/missing", []any{"a/./b"}}, "/missing/0", false},
		// (The validator misreports where propertyNames fails.)
		{mutation{events.TypeJobSubmitted, "/spec/work/env", map[string]any{"A=B": "c"}}, anywhere, false},
		{mutation{events.TypeJobSubmitted, "/spec/work/command", []any{}}, "/spec/work/command", false},
		{mutation{events.TypeJobSubmitted, "/spec/work/command", []any{"", "x"}}, "/spec/work/command/0", false},

		// Values out of range.
		{mutation{events.TypeComputeHeld, "/attempt", 0}, "/attempt", false},
		{mutation{events.TypeComputeHeld, "/cpu", 0}, "/cpu", false},
		{mutation{events.TypeJobSubmitted, "/spec/request/cpu", 0}, "/spec/request/cpu", false},
		{mutation{events.TypeJobSubmitted, "/spec/request/limit_seconds", 0}, "/spec/request/limit_seconds", false},
		{mutation{events.TypeJobSubmitted, "/spec/request/memory_bytes", -1}, "/spec/request/memory_bytes", false},
		{mutation{events.TypeNodeAnnounced, "/cpu", -2}, "/cpu", false},
		{mutation{events.TypeOutputReturned, "/bytes", -3}, "/bytes", false},
		{mutation{events.TypeRunStopped, "/usage/cpu_seconds", -0.5}, "/usage/cpu_seconds", false},
		{mutation{events.TypeRunStopped, "/exit_code", 256}, "/exit_code", false},
		{mutation{events.TypeJobRejected, "/problems", []any{}}, "/problems", false},
		{mutation{events.TypeJobRejected, "/reason", ""}, "/reason", false},

		// Missing required fields.
		{mutation{events.TypeJobRequested, "/submitter", deleteIt}, "", false},
		{mutation{events.TypeJobRequested, "/spec/request/limit_seconds", deleteIt}, "/spec/request", false},
		{mutation{events.TypeRunStopped, "/usage", deleteIt}, "", false},
		{mutation{events.TypeRunStarted, "/attempt", deleteIt}, "", false},
		{mutation{events.TypeOutputReturned, "/missing", deleteIt}, "", false},
		{mutation{events.TypeJobSubmitted, "/spec/data/1/from_job", deleteIt}, "/spec/data/1", false}, // neither upload nor job
		{mutation{events.TypeJobSubmitted, "/spec/data/0/kind", deleteIt}, "/spec/data/0", false},     // a digest of what?

		// Facts that contradict themselves.
		{mutation{events.TypeRunStopped, "/exit_code", 1}, "/exit_code", false}, // succeeded
		{mutation{events.TypeRunStopped, "/exit_code", deleteIt}, "", false},    // succeeded
		{mutation{events.TypeOutputReturned, "/partial", true}, "/partial", false},
		{mutation{events.TypeComputeReleased, "/final", false}, "/outcome", false},
	}...)

	for _, c := range cases {
		t.Run(fmt.Sprintf("%s%s=%v", c.ceType, c.ptr, c.value), func(t *testing.T) {
			t.Parallel()
			body := mutate(t, c.mutation)
			err := validate(set.body(t, c.ceType), body)
			if err == nil {
				t.Fatalf("the schema accepts %s", body)
			}
			// An unknown field is reported at the object when additionalProperties
			// refuses it, and at the field itself under unevaluatedProperties.
			if !failsAt(err, c.at) && !failsAt(err, c.ptr) && c.at != anywhere {
				t.Errorf("the schema refuses %s, but not at %q:\n%v", body, c.at, err)
			}
			_, derr := events.Decode(goldenSubjects[c.ceType], goldenHeaders(c.ceType), body)
			if c.decode && derr == nil {
				t.Errorf("events.Decode accepts %s", body)
			}
		})
	}
}

// TestSchemasAccept checks bodies that look unusual but are valid, so that
// the schemas are not stricter than the facts.
func TestSchemasAccept(t *testing.T) {
	t.Parallel()
	set := loadSchemas(t)
	for _, m := range []mutation{
		{events.TypeJobRequested, "/spec/name", deleteIt},
		{events.TypeJobRequested, "/spec/data", deleteIt},
		{events.TypeJobRequested, "/spec/output", deleteIt},
		{events.TypeJobRequested, "/spec/work/env", deleteIt},
		{events.TypeJobRequested, "/spec/work/image", "ghcr.io/example/count:1.2"},
		{events.TypeJobRequested, "/spec/work/command", []any{"/bin/echo", ""}},
		{events.TypeJobSubmitted, "/spec/data/1", map[string]any{ // an earlier job's output, resolved
			"name": "model", "from_job": "01JC8W2M5R7T9V1X3Z5B7D9F1H",
			"digest": "sha256:" + strings.Repeat("0", 64), "kind": "dir", "bytes": 1 << 20, "files": 3,
		}},
		{events.TypeJobSubmitted, "/spec/data/0/name", "clips-v2.tar"}, // SUBMIT never took a space
		{events.TypeJobSubmitted, "/spec/output/0/path", "plots/**/*.png"},
		{events.TypeJobSubmitted, "/spec/request/cpu", 0.25},
		{events.TypeRunStopped, "/outcome", "out_of_memory"}, // and so no exit code needed…
		{events.TypeRunStopped, "/outcome", "disk_exceeded"},
		{events.TypeOutputReturned, "/outcome", "disk_exceeded"},
		{events.TypeOutputReturned, "/files", nil},
		{events.TypeOutputReturned, "/files/0/path", "...hidden/.x"},
		{events.TypeComputeReleased, "/outcome", "node_lost"},
		{events.TypeJobRejected, "/problems", deleteIt},
		{events.TypeNodeAnnounced, "/labels", deleteIt},
	} {
		body := mutate(t, m)
		if err := validate(set.body(t, m.ceType), body); err != nil {
			t.Errorf("%s with %s=%v is refused:\n%v", m.ceType, m.ptr, m.value, err)
		}
	}
	// …when the exit code is absent, as it is for a killed job.
	var stopped map[string]any
	if err := json.Unmarshal(readGolden(t, events.TypeRunStopped), &stopped); err != nil {
		t.Fatal(err)
	}
	stopped["outcome"] = "out_of_memory"
	delete(stopped, "exit_code")
	body, _ := json.Marshal(stopped)
	if err := validate(set.body(t, events.TypeRunStopped), body); err != nil {
		t.Errorf("a killed run without exit code is refused:\n%v", err)
	}
}

// TestEnvelope checks the message each golden event is published as: every
// header set, Nats-Msg-Id equal to ce-id, the subject SubjectOf promises, the
// headers valid against envelope.json, and Decode giving back the envelope.
func TestEnvelope(t *testing.T) {
	t.Parallel()
	set := loadSchemas(t)
	subjects := envelopeSubjects(t, set)
	for _, ceType := range sortedTypes() {
		t.Run(ceType, func(t *testing.T) {
			t.Parallel()
			ptr := reflect.New(goType(t, ceType))
			if err := json.Unmarshal(readGolden(t, ceType), ptr.Interface()); err != nil {
				t.Fatal(err)
			}
			ev := ptr.Interface().(events.Event)
			subject := goldenSubject(ceType)
			env := events.New(subject, ev, "e31/test", goldenTime)
			m, err := env.Msg()
			if err != nil {
				t.Fatal(err)
			}

			if m.Subject != goldenSubjects[ceType] {
				t.Errorf("published on %q, expected %q", m.Subject, goldenSubjects[ceType])
			}
			want := map[string]string{
				events.HeaderSpecVersion: "1.0",
				events.HeaderID:          goldenIDs[ceType],
				events.HeaderType:        ceType,
				events.HeaderSource:      "e31/test",
				events.HeaderTime:        "2025-03-14T09:26:53.589793238Z",
				events.HeaderSubject:     subject,
				events.HeaderContentType: "application/json",
				"Nats-Msg-Id":            goldenIDs[ceType],
			}
			for k, v := range want {
				if got := m.Header.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("header %s: got %q, expected [%q]", k, got, v)
				}
			}
			if len(m.Header) != len(want) {
				t.Errorf("headers: got %v, expected only %v", m.Header, want)
			}
			if id := events.ID(subject, ev); id != goldenIDs[ceType] {
				t.Errorf("events.ID = %q, expected %q", id, goldenIDs[ceType])
			}
			if !sameJSON(t, m.Data, readGolden(t, ceType)) {
				t.Errorf("body: got %s, expected the golden body", m.Data)
			}

			// What envelope.json says about the headers and the subject.
			headers := map[string]any{}
			for k, v := range m.Header {
				headers[k] = v[0]
			}
			if err := set.compiled[envelopeFile].Validate(headers); err != nil {
				t.Errorf("headers are not valid:\n%v", err)
			}
			subj := strings.ReplaceAll(subjects[ceType], "{ce-subject}", subject)
			if h, ok := events.HoldOf(ev); ok {
				subj = strings.ReplaceAll(subj, "{node}", h.Node)
			}
			subj = strings.ReplaceAll(subj, "{submitter}", "alice")
			subj = strings.ReplaceAll(subj, "{by}", "alice")
			if subj != m.Subject {
				t.Errorf("envelope.json says the subject is %q, but it is %q", subj, m.Subject)
			}

			got, err := events.Decode(m.Subject, m.Header, m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != env.ID || got.Type != ceType || got.Source != env.Source || got.Subject != subject ||
				!got.Time.Equal(goldenTime) || got.NATSSubject != m.Subject || got.Seq != 0 {
				t.Errorf("Decode gave\n%+v\nexpected\n%+v", got, env)
			}
			if !reflect.DeepEqual(got.Event, ev) {
				t.Errorf("Decode gave the event %#v, expected %#v", got.Event, ev)
			}
		})
	}
}

// envelopeSubjects reads, for each type, the x-e31-subject template that
// envelope.json documents, and checks that it documents every type once.
func envelopeSubjects(t testing.TB, set *schemaSet) map[string]string {
	t.Helper()
	out := map[string]string{}
	allOf, _ := set.raw[envelopeFile]["allOf"].([]any)
	for _, a := range allOf {
		branch, _ := a.(map[string]any)
		var ceType string
		if ifs, ok := branch["if"].(map[string]any); ok {
			if props, ok := ifs["properties"].(map[string]any); ok {
				if ct, ok := props["ce-type"].(map[string]any); ok {
					ceType, _ = ct["const"].(string)
				}
			}
		}
		subj, _ := branch["x-e31-subject"].(string)
		if ceType == "" || subj == "" {
			t.Fatalf("envelope.json: a branch of allOf without ce-type const or x-e31-subject: %v", branch)
		}
		if _, dup := out[ceType]; dup {
			t.Errorf("envelope.json: %s twice", ceType)
		}
		out[ceType] = subj
	}
	var enum []string
	props, _ := set.raw[envelopeFile]["properties"].(map[string]any)
	ct, _ := props["ce-type"].(map[string]any)
	list, _ := ct["enum"].([]any)
	for _, v := range list {
		s, _ := v.(string)
		enum = append(enum, s)
	}
	sort.Strings(enum)
	var documented []string
	for k := range out {
		documented = append(documented, k)
	}
	sort.Strings(documented)
	if types := sortedTypes(); !slices.Equal(enum, types) || !slices.Equal(documented, types) {
		t.Errorf("envelope.json: ce-type enum %v and subjects %v, expected %v", enum, documented, types)
	}
	return out
}

// TestReadmeExample checks that the JobRequested body README.md shows an
// outside producer is one e31 accepts.
func TestReadmeExample(t *testing.T) {
	t.Parallel()
	readme, err := fs.ReadFile(os.DirFS("schema"), "README.md")
	if err != nil {
		t.Fatal(err)
	}
	var bodies [][]byte
	for _, line := range strings.Split(string(readme), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "'{") && strings.HasSuffix(line, "}'") {
			bodies = append(bodies, []byte(strings.Trim(line, "'")))
		}
	}
	if len(bodies) != 1 {
		t.Fatalf("found %d example bodies in README.md, expected 1", len(bodies))
	}
	set := loadSchemas(t)
	if err := validate(set.body(t, events.TypeJobRequested), bodies[0]); err != nil {
		t.Errorf("the README example is not valid:\n%v", err)
	}
	const job = "report-2025-03-14"
	h := goldenHeaders(events.TypeJobRequested)
	h.Set(events.HeaderSubject, job)
	if _, err := events.Decode("e31.job."+job+".requested.billing", h, bodies[0]); err != nil {
		t.Errorf("the README example does not decode: %v", err)
	}
}

// TestEnvelopeRefusesBadHeaders checks envelope.json against headers an
// outside producer could get wrong.
func TestEnvelopeRefusesBadHeaders(t *testing.T) {
	t.Parallel()
	set := loadSchemas(t)
	sch := set.compiled[envelopeFile]
	good := func() map[string]any {
		out := map[string]any{}
		for k, v := range goldenHeaders(events.TypeComputeHeld) {
			out[k] = v[0]
		}
		return out
	}
	if err := sch.Validate(good()); err != nil {
		t.Fatalf("good headers refused: %v", err)
	}
	for _, c := range []struct {
		header, value string // value "" deletes the header
		rename        string // if set, the header is sent under this name instead
	}{
		{events.HeaderSpecVersion, "0.3", ""},
		{events.HeaderID, goldenJob + "/held", ""},                    // no attempt
		{events.HeaderID, "4b0c7d3e-9f0a-4d52-8d7e-0f3c1a2b3c4d", ""}, // random, so not idempotent
		{events.HeaderMsgID, goldenJob + "/held/0", ""},
		{events.HeaderType, "e31.job.exploded.v1", ""},
		{events.HeaderTime, "2025-03-14 09:26:53", ""},
		{events.HeaderTime, "1741944413", ""},
		{events.HeaderSubject, "job.1", ""},
		{events.HeaderContentType, "text/plain", ""},
		{events.HeaderSource, "", ""},
		{events.HeaderMsgID, "", ""},
		{events.HeaderContentType, "", ""},
		{events.HeaderType, "", "ce-Type"}, // names are case-sensitive
		{events.HeaderMsgID, "", "nats-msg-id"},
	} {
		h := good()
		switch {
		case c.rename != "":
			h[c.rename] = h[c.header]
			delete(h, c.header)
		case c.value == "":
			delete(h, c.header)
		default:
			h[c.header] = c.value
		}
		if err := sch.Validate(h); err == nil {
			t.Errorf("envelope.json accepts %s=%q (renamed %q)", c.header, c.value, c.rename)
		}
	}
}

// TestDecodeRefuses checks that Decode refuses what is not an e31 event, with
// a permanent *DecodeError naming the subject it was read from.
func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	held := readGolden(t, events.TypeComputeHeld)
	heldSubject := goldenSubjects[events.TypeComputeHeld]

	pad := func(n int) []byte {
		// {"reason":"xxx…"} of exactly n bytes.
		return []byte(`{"reason":"` + strings.Repeat("x", n-len(`{"reason":""}`)) + `"}`)
	}
	cancelled := goldenSubjects[events.TypeJobCancelled]
	if _, err := events.Decode(cancelled, goldenHeaders(events.TypeJobCancelled), pad(events.MaxBodyBytes)); err != nil {
		t.Fatalf("a body of exactly MaxBodyBytes is refused: %v", err)
	}

	without := func(name string) nats.Header {
		h := goldenHeaders(events.TypeComputeHeld)
		h.Del(name)
		return h
	}
	with := func(ceType, name, value string) nats.Header {
		h := goldenHeaders(ceType)
		h.Set(name, value)
		return h
	}
	for _, c := range []struct {
		name    string
		subject string
		header  nats.Header
		body    []byte
		unknown bool   // the error is ErrUnknownType, which readers skip
		names   string // the error names this, where it names the field
	}{
		{"held on another node's subject", "e31.job." + goldenJob + ".held.node-b2", goldenHeaders(events.TypeComputeHeld), held, false, ""},
		{"held on another job's subject", "e31.job.other-job.held." + goldenNode, goldenHeaders(events.TypeComputeHeld), held, false, ""},
		{"held without the node token", "e31.job." + goldenJob + ".held", goldenHeaders(events.TypeComputeHeld), held, false, ""},
		{"submitted on the rejected subject", "e31.job." + goldenJob + ".rejected", goldenHeaders(events.TypeJobSubmitted), readGolden(t, events.TypeJobSubmitted), false, ""},
		{"node event on a job subject", "e31.job." + goldenNode + ".announced", goldenHeaders(events.TypeNodeAnnounced), readGolden(t, events.TypeNodeAnnounced), false, ""},
		{"no ce-specversion", heldSubject, without(events.HeaderSpecVersion), held, false, ""},
		{"no ce-id", heldSubject, without(events.HeaderID), held, false, ""},
		{"no ce-type", heldSubject, without(events.HeaderType), held, false, ""},
		{"no ce-source", heldSubject, without(events.HeaderSource), held, false, ""},
		{"no ce-time", heldSubject, without(events.HeaderTime), held, false, ""},
		{"no ce-subject", heldSubject, without(events.HeaderSubject), held, false, ""},
		{"ce-specversion 0.3", heldSubject, with(events.TypeComputeHeld, events.HeaderSpecVersion, "0.3"), held, false, ""},
		{"ce-time not RFC 3339", heldSubject, with(events.TypeComputeHeld, events.HeaderTime, "2025-03-14 09:26:53"), held, false, ""},
		{"ce-time yesterday", heldSubject, with(events.TypeComputeHeld, events.HeaderTime, "yesterday"), held, false, ""},
		{"ce-subject not an id", "e31.job.a.b.held." + goldenNode, with(events.TypeComputeHeld, events.HeaderSubject, "a.b"), held, false, ""},
		{"body over MaxBodyBytes", cancelled, goldenHeaders(events.TypeJobCancelled), pad(events.MaxBodyBytes + 1), false, ""},
		{"trailing object", cancelled, goldenHeaders(events.TypeJobCancelled), []byte(`{"reason":"x"} {"reason":"y"}`), false, ""},
		{"trailing garbage", cancelled, goldenHeaders(events.TypeJobCancelled), []byte(`{"reason":"x"}garbage`), false, ""},
		{"not JSON", cancelled, goldenHeaders(events.TypeJobCancelled), []byte(`reason: x`), false, ""},
		{"unknown field", cancelled, goldenHeaders(events.TypeJobCancelled), []byte(`{"reason":"x","by":"alice"}`), false, `"by"`},
		{"wrong type", heldSubject, goldenHeaders(events.TypeComputeHeld), bytes.Replace(held, []byte(`"attempt": 1`), []byte(`"attempt": "1"`), 1), false, "attempt"},
		// A publisher outside e31 knows the JSON, not e31's Go types: the
		// error names the field by its path in the body.
		{"wrong type, nested", heldSubject, goldenHeaders(events.TypeComputeHeld), bytes.Replace(held, []byte(`"memory_bytes": 536870912,
    `), []byte(`"memory_bytes": "512MiB",
    `), 2), false, "spec.request.memory_bytes"},
		{"unknown type", cancelled, with(events.TypeJobCancelled, events.HeaderType, "e31.job.cancelled.v9"), []byte(`{"reason":"x"}`), true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := events.Decode(c.subject, c.header, c.body)
			if err == nil {
				t.Fatal("accepted")
			}
			var de *events.DecodeError
			if !errors.As(err, &de) || de.Subject != c.subject {
				t.Errorf("got %v, expected a *DecodeError on %s", err, c.subject)
			}
			if events.IsUnknownType(err) != c.unknown {
				t.Errorf("IsUnknownType(%v) = %v, expected %v", err, !c.unknown, c.unknown)
			}
			if !strings.Contains(err.Error(), c.names) {
				t.Errorf("got %v, expected it to name %s", err, c.names)
			}
		})
	}
}
