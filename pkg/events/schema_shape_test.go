package events_test

// The shape of the Go types against the schemas: every field filled,
// walked, and each schema refused by a mutation at a known place.

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/e31net/e31/pkg/events"
)

// fill sets every field of v, recursively, to a valid value that is not zero.
// name is the JSON name of the field v belongs to, for the strings that must
// match a pattern. A field of a kind fill does not know stops the test, so
// that it is taught how to fill it rather than leaving it empty.
func fill(t testing.TB, v reflect.Value, name string) {
	t.Helper()
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		rt := v.Type()
		for i := range rt.NumField() {
			f := rt.Field(i)
			if !f.IsExported() {
				continue
			}
			fname, _ := jsonName(f)
			fill(t, v.Field(i), fname)
		}
	case reflect.String:
		if v.Type() == reflect.TypeFor[events.Outcome]() {
			v.SetString(string(events.Failed))
			return
		}
		if v.Type() == reflect.TypeFor[events.Isolation]() {
			v.SetString(string(events.IsolationSandbox))
			return
		}
		s, ok := map[string]string{
			"node":          "node-7",
			"boot":          "boot-2",
			"from_job":      "01JC8W2M5R7T9V1X3Z5B7D9F1H",
			"checkpoint_of": "01JC8W2M5R7T9V1X3Z5B7D9F1C",
			"resumed_from":  "1.3",
			"trigger":       "every",
			"after":         "01JC8W2M5R7T9V1X3Z5B7D9F1G",
			"again_of":      "01JC8W2M5R7T9V1X3Z5B7D9F1S-3",
			"submitter":     "alice",
			"by":            "alice",
			"id":            "01JC8W2M5R7T9V1X3Z5B7D9F1S",
			"digest":        "sha256:" + strings.Repeat("ab", 32),
			"kind":          "dir",
			"path":          "logs/run.txt",
			"missing":       "plots/*.png",
			"manifest":      "sha256:" + strings.Repeat("cd", 32),
			"mode":          "0755",
			"what":          "output",
			"cause":         "expired",
			"name":          "clips",
			"command":       "/bin/true",
			"image":         "alpine:3.20",
			"gpus":          "GPU-5f1c3a9e-2b7d-4e08-9c61-3d2a7b8e4f10",
			"uuid":          "GPU-5f1c3a9e-2b7d-4e08-9c61-3d2a7b8e4f10",
			"device":        "GPU-5f1c3a9e-2b7d-4e08-9c61-3d2a7b8e4f10",
			// An ed25519 key and signature, as their patterns have them.
			"key":         "ed25519:" + strings.Repeat("A", 43) + "=",
			"issuer":      "ed25519:" + strings.Repeat("B", 43) + "=",
			"signing_key": "ed25519:" + strings.Repeat("C", 43) + "=",
			"signature":   strings.Repeat("D", 86) + "==",
		}[name]
		if !ok {
			s = "text for " + name
		}
		v.SetString(s)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		// A size has a floor where it is declared (a request's memory and
		// disk: 1MiB); 3MiB is within it everywhere.
		if strings.HasSuffix(name, "_bytes") {
			v.SetInt(3 << 20)
			return
		}
		v.SetInt(3)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Float32, reflect.Float64:
		if name == "retention_seconds" { // a minute at least
			v.SetFloat(3600)
			return
		}
		v.SetFloat(1.5)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), name)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), name)
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			t.Fatalf("fill: %s: map key %v", name, v.Type().Key())
		}
		v.Set(reflect.MakeMap(v.Type()))
		val := reflect.New(v.Type().Elem()).Elem()
		fill(t, val, name)
		v.SetMapIndex(reflect.ValueOf("KEY_1").Convert(v.Type().Key()), val)
	default:
		t.Fatalf("fill: %s: cannot fill a %v", name, v.Type())
	}
}

// jsonName is the name encoding/json gives a struct field, and whether the
// field is left out when empty. An embedded struct without a tag has no name:
// its fields are promoted.
func jsonName(f reflect.StructField) (name string, omitempty bool) {
	tag := f.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	omitempty = slices.Contains(strings.Split(opts, ","), "omitempty")
	if name == "" && !f.Anonymous {
		name = f.Name
	}
	return name, omitempty
}

type jsonField struct {
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists the JSON fields of a struct type, including those of
// embedded structs such as Hold.
func jsonFields(rt reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, omitempty := jsonName(f)
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		out[name] = jsonField{typ: f.Type, omitempty: omitempty}
	}
	return out
}

// chain is a schema with everything it applies to the same instance through
// $ref and allOf, in order.
func chain(sch *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	var walk func(*jsonschema.Schema)
	walk = func(s *jsonschema.Schema) {
		if s == nil || slices.Contains(out, s) {
			return
		}
		out = append(out, s)
		walk(s.Ref)
		for _, a := range s.AllOf {
			walk(a)
		}
	}
	walk(sch)
	return out
}

// checkShape checks that sch describes exactly the JSON the Go type rt
// encodes to. omitempty says the encoder leaves the value out when it is
// empty, rather than writing null for a nil slice or map.
func checkShape(t *testing.T, at string, rt reflect.Type, sch *jsonschema.Schema, omitempty bool) {
	t.Helper()
	nullable := false
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	switch rt.Kind() {
	case reflect.Slice, reflect.Map:
		// Without omitempty, a nil slice or map is written as null.
		nullable = !omitempty
	}

	var jsonType string
	switch rt.Kind() {
	case reflect.String:
		jsonType = "string"
	case reflect.Struct:
		jsonType = "object"
		if rt == reflect.TypeFor[time.Time]() {
			jsonType = "string" // RFC 3339
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		jsonType = "integer"
	case reflect.Float32, reflect.Float64:
		jsonType = "number"
	case reflect.Bool:
		jsonType = "boolean"
	case reflect.Slice:
		jsonType = "array"
	case reflect.Map:
		jsonType = "object"
	default:
		t.Fatalf("%s: no JSON type for a %v", at, rt)
	}
	var declared []string
	for _, s := range chain(sch) {
		if s.Types != nil {
			declared = append(declared, s.Types.ToStrings()...)
		}
		if s.Enum != nil {
			for _, v := range s.Enum.Values {
				if _, ok := v.(string); !ok || jsonType != "string" {
					t.Errorf("%s: enum value %v for a Go %v", at, v, rt)
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Errorf("%s: the schema gives no type; the Go type is a %v (%s)", at, rt, jsonType)
	}
	for _, d := range declared {
		if d != jsonType && !(d == "null" && nullable) {
			t.Errorf("%s: the schema allows %s, but the Go %v is written as %s", at, d, rt, jsonType)
		}
	}
	if nullable && !slices.Contains(declared, "null") {
		t.Errorf("%s: the Go encoder writes null for an empty %v, but the schema does not allow null", at, rt)
	}

	switch {
	case rt == reflect.TypeFor[time.Time]():
	case rt.Kind() == reflect.Struct:
		checkObject(t, at, rt, sch)
	case rt.Kind() == reflect.Slice:
		var items *jsonschema.Schema
		for _, s := range chain(sch) {
			if s.Items2020 != nil {
				items = s.Items2020
			}
		}
		if items == nil {
			t.Errorf("%s: an array without items", at)
			return
		}
		checkShape(t, at+"[]", rt.Elem(), items, true)
	case rt.Kind() == reflect.Map:
		var values *jsonschema.Schema
		for _, s := range chain(sch) {
			if ap, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
				values = ap
			}
		}
		if values == nil {
			t.Errorf("%s: a map without a schema for its values (additionalProperties)", at)
			return
		}
		checkShape(t, at+"{}", rt.Elem(), values, true)
	}
}

// checkObject checks the properties of the schema of a struct.
func checkObject(t *testing.T, at string, rt reflect.Type, sch *jsonschema.Schema) {
	t.Helper()
	fields := jsonFields(rt)
	props := map[string]*jsonschema.Schema{}
	required := map[string]bool{}
	closed := false
	for _, s := range chain(sch) {
		for k, p := range s.Properties {
			props[k] = p
		}
		for _, r := range s.Required {
			required[r] = true
		}
		if b, ok := s.AdditionalProperties.(bool); ok && !b {
			closed = true
		}
		if u := s.UnevaluatedProperties; u != nil && u.Bool != nil && !*u.Bool {
			closed = true
		}
		// Conditions may only constrain properties the type has.
		for _, c := range []*jsonschema.Schema{s.If, s.Then, s.Else} {
			if c == nil {
				continue
			}
			for k := range c.Properties {
				if _, ok := fields[k]; !ok {
					t.Errorf("%s: a condition names %q, which is not a field of %v", at, k, rt)
				}
			}
		}
		for k := range s.DependentRequired {
			if _, ok := fields[k]; !ok {
				t.Errorf("%s: dependentRequired names %q, which is not a field of %v", at, k, rt)
			}
		}
	}
	if !closed {
		t.Errorf("%s: the schema of %v allows unknown properties; decoders refuse them", at, rt)
	}
	for name := range props {
		if _, ok := fields[name]; !ok {
			t.Errorf("%s: the schema has property %q, which %v does not have", at, name, rt)
		}
	}
	for name := range required {
		if _, ok := props[name]; !ok {
			t.Errorf("%s: %q is required but not a property", at, name)
		}
	}
	for name, f := range fields {
		p, ok := props[name]
		if !ok {
			t.Errorf("%s: %v has field %q, which the schema does not describe", at, rt, name)
			continue
		}
		if f.omitempty == required[name] {
			t.Errorf("%s.%s: required is %v, but the Go encoder %s", at, name, required[name],
				map[bool]string{true: "leaves it out when empty", false: "always writes it"}[f.omitempty])
		}
		checkShape(t, at+"."+name, f.typ, p, f.omitempty || neverEmpty[rt.Name()+"."+name])
	}
}

// neverEmpty lists the fields the Go encoder would write as null when nil,
// for which the schema nevertheless requires a value, because an event
// without one is not valid: a job always has a command.
var neverEmpty = map[string]bool{
	"Work.command": true,
}

// mutation is a change to a golden body.
type mutation struct {
	ceType string
	ptr    string // a JSON pointer into the body
	value  any    // the new value, or deleteIt to remove the member
}

// deleted, as a mutation value, removes the member at ptr.
type deleted struct{}

var deleteIt deleted

// mutate applies m to the golden body of its type.
func mutate(t testing.TB, m mutation) []byte {
	t.Helper()
	var doc any
	dec := json.NewDecoder(bytes.NewReader(readGolden(t, m.ceType)))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	toks := strings.Split(m.ptr, "/")[1:]
	parent := doc
	for _, tok := range toks[:len(toks)-1] {
		parent = child(t, parent, tok, m.ptr)
	}
	last := toks[len(toks)-1]
	switch p := parent.(type) {
	case map[string]any:
		if m.value == deleteIt {
			if _, ok := p[last]; !ok {
				t.Fatalf("%s: nothing to delete at %s", m.ceType, m.ptr)
			}
			delete(p, last)
		} else {
			p[last] = m.value
		}
	case []any:
		i, err := strconv.Atoi(last)
		if err != nil || i >= len(p) || m.value == deleteIt {
			t.Fatalf("%s: cannot change %s", m.ceType, m.ptr)
		}
		p[i] = m.value
	default:
		t.Fatalf("%s: %s is inside a %T", m.ceType, m.ptr, parent)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func child(t testing.TB, v any, tok, ptr string) any {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		c, ok := v[tok]
		if !ok {
			t.Fatalf("no %s in %s", tok, ptr)
		}
		return c
	case []any:
		i, err := strconv.Atoi(tok)
		if err != nil || i >= len(v) {
			t.Fatalf("no %s in %s", tok, ptr)
		}
		return v[i]
	}
	t.Fatalf("%s: cannot go into a %T", ptr, v)
	return nil
}

// failsAt reports whether a validation error has a leaf at the instance
// location loc (a JSON pointer), so that a test knows why a body was refused.
func failsAt(err error, loc string) bool {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return false
	}
	var walk func(*jsonschema.ValidationError) bool
	walk = func(e *jsonschema.ValidationError) bool {
		if len(e.Causes) == 0 {
			return "/"+strings.Join(e.InstanceLocation, "/") == loc || (loc == "" && len(e.InstanceLocation) == 0)
		}
		return slices.ContainsFunc(e.Causes, walk)
	}
	return walk(verr)
}

// anywhere, as where a refusal is expected, accepts any location.
const anywhere = "*"
