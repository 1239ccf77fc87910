package jobfile

// A job file is described three times: by this package (the parser's
// tables and Validate, which SUBMIT runs), by the JSON Schema of the spec
// (pkg/events/schema, which programs outside e31 validate against before
// they publish), and by the reference in docs/submitting.md, which people
// read. The tests here hold the three together: a bound changed in one
// place and not the others fails.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/e31net/e31/pkg/events"
)

// referenceDoc is the job file reference people read.
const referenceDoc = "../../docs/submitting.md"

// requestedSchema compiles the schema of JobRequested, the body a program
// publishes to submit, from the schemas e31 embeds, resolving $ref among
// them alone.
func requestedSchema(t testing.TB) (*jsonschema.Schema, map[string]any) {
	t.Helper()
	fsys := events.Schemas()
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	var defs map[string]any
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
		if name == "defs.json" {
			if err := json.Unmarshal(b, &defs); err != nil {
				t.Fatal(err)
			}
		}
	}
	sch, err := c.Compile(events.SchemaBase + events.TypeJobRequested + ".json")
	if err != nil {
		t.Fatal(err)
	}
	return sch, defs["$defs"].(map[string]any)
}

const someJob = "01JC8W2M5R7T9V1X3Z5B7D9F1H"

// requestBody is a valid JobRequested body with path (slash-separated keys,
// numbers for list indexes) set to value.
func requestBody(t testing.TB, path string, value any) []byte {
	t.Helper()
	body := map[string]any{
		"submitter": "alice",
		"spec": map[string]any{
			"work": map[string]any{"command": []any{"/bin/true"}},
			"data": []any{map[string]any{"name": "clips", "from_job": someJob}},
			"request": map[string]any{
				"cpu": 1, "memory_bytes": 512 << 20, "gpu": 0, "disk_bytes": 1 << 30, "limit_seconds": 600,
			},
			"output": []any{map[string]any{"path": "count.txt", "required": true}},
		},
	}
	keys := strings.Split(path, "/")
	var at any = body
	for i, k := range keys {
		last := i == len(keys)-1
		switch node := at.(type) {
		case map[string]any:
			if last {
				node[k] = value
			} else {
				at = node[k]
			}
		case []any:
			n, err := strconv.Atoi(k)
			if err != nil || n >= len(node) {
				t.Fatalf("%s: no element %s", path, k)
			}
			if last {
				node[n] = value
			} else {
				at = node[n]
			}
		default:
			t.Fatalf("%s: %s is not inside an object or a list", path, k)
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// e31Takes says whether e31 takes body: it decodes strictly, as SUBMIT
// does, and the spec passes Validate.
func e31Takes(body []byte) error {
	var req events.JobRequested
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return Validate(req.Spec)
}

// schemaTakes says whether the schema takes body.
func schemaTakes(sch *jsonschema.Schema, body []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

func repeat(s string, n int) string { return strings.Repeat(s, n) }

// list is n values made by f.
func list(n int, f func(i int) any) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// TestSchemaAgreesWithValidate sets each bounded field of a request just
// inside and just outside its bounds and checks that the JSON Schema and
// e31 (Validate, behind a strict decoder) give the same answer: a program
// that validates against the schema before it publishes is never rejected
// for a bound the schema did not tell it.
func TestSchemaAgreesWithValidate(t *testing.T) {
	t.Parallel()
	sch, _ := requestedSchema(t)
	id := func(i int) string { return fmt.Sprintf("job-%d", i) }
	cases := []struct {
		path  string
		value any
	}{
		{"spec/request/cpu", 0}, {"spec/request/cpu", MinCPU / 2}, {"spec/request/cpu", MinCPU},
		{"spec/request/cpu", MaxCPU}, {"spec/request/cpu", MaxCPU + 0.5},
		{"spec/request/memory_bytes", 0}, {"spec/request/memory_bytes", MinMemory - 1}, {"spec/request/memory_bytes", MinMemory},
		{"spec/request/memory_bytes", MaxMemory}, {"spec/request/memory_bytes", MaxMemory + 1},
		{"spec/request/gpu", -1}, {"spec/request/gpu", 0}, {"spec/request/gpu", MaxGPU}, {"spec/request/gpu", MaxGPU + 1},
		{"spec/request/gpu", 1.5},
		{"spec/request/disk_bytes", 0}, {"spec/request/disk_bytes", MinDisk - 1}, {"spec/request/disk_bytes", MinDisk},
		{"spec/request/disk_bytes", MaxDisk}, {"spec/request/disk_bytes", MaxDisk + 1},
		{"spec/request/limit_seconds", -1}, {"spec/request/limit_seconds", 0}, {"spec/request/limit_seconds", 0.001},
		{"spec/request/limit_seconds", MaxLimit.Seconds()}, {"spec/request/limit_seconds", MaxLimit.Seconds() + 1},
		{"spec/retention_seconds", 0}, {"spec/retention_seconds", MinRetention.Seconds() - 1},
		{"spec/retention_seconds", MinRetention.Seconds()}, {"spec/retention_seconds", MaxRetention.Seconds()},
		{"spec/retention_seconds", MaxRetention.Seconds() + 1},
		{"spec/priority", events.MinPriority - 1}, {"spec/priority", events.MinPriority},
		{"spec/priority", events.MaxPriority}, {"spec/priority", events.MaxPriority + 1},
		{"spec/name", repeat("é", MaxNameLen)}, {"spec/name", repeat("é", MaxNameLen+1)},
		{"spec/name", "a\tb"}, {"spec/name", "a\u0085b"}, {"spec/name", ""},
		{"spec/work/command", []any{}}, {"spec/work/command", []any{""}}, {"spec/work/command", []any{"/bin/echo", ""}},
		{"spec/work/command", []any{"/bin/echo", "a\x00b"}}, {"spec/work/command", []any{"/bin/\x00"}},
		{"spec/work/env", map[string]any{"LANG": "C"}}, {"spec/work/env", map[string]any{"E31_DATA": "/"}},
		{"spec/work/env", map[string]any{"1A": "x"}}, {"spec/work/env", map[string]any{"_A": "x\x00y"}},
		{"spec/work/image", "alpine:3.20"}, {"spec/work/image", "-rm"}, {"spec/work/image", ""},
		{"spec/work/image", repeat("a", MaxImageLen)}, {"spec/work/image", repeat("a", MaxImageLen+1)},
		{"spec/data", list(MaxData, func(i int) any { return map[string]any{"name": id(i), "from_job": someJob} })},
		{"spec/data", list(MaxData+1, func(i int) any { return map[string]any{"name": id(i), "from_job": someJob} })},
		{"spec/data/0/name", "a b"}, {"spec/data/0/name", "."}, {"spec/data/0/name", ".."}, {"spec/data/0/name", ".hidden"},
		{"spec/data/0/name", "é"}, {"spec/data/0/name", "a/b"}, {"spec/data/0/name", ""},
		{"spec/data/0/name", repeat("a", MaxDataNameLen)}, {"spec/data/0/name", repeat("a", MaxDataNameLen+1)},
		{"spec/data/0", map[string]any{"name": "x", "from_job": someJob, "kind": "dir"}},
		{"spec/data/0", map[string]any{"name": "x", "digest": "sha256:" + repeat("ab", 32)}},
		{"spec/data/0", map[string]any{"name": "x", "digest": "sha256:" + repeat("ab", 32), "kind": "file"}},
		{"spec/data/0", map[string]any{"name": "x", "digest": "sha256:" + repeat("AB", 32), "kind": "file"}},
		{"spec/data/0", map[string]any{"name": "x", "digest": "sha256:" + repeat("ab", 32), "kind": "link"}},
		{"spec/data/0", map[string]any{"name": "x", "from_job": someJob, "bytes": -1}},
		{"spec/data/0", map[string]any{"name": "x"}},
		{"spec/data/0/from_job", "../x"},
		{"spec/after", list(MaxAfter, func(i int) any { return id(i) })},
		{"spec/after", list(MaxAfter+1, func(i int) any { return id(i) })},
		{"spec/after", []any{someJob, someJob}}, {"spec/after", []any{"../x"}},
		{"spec/output", list(MaxOutputs, func(i int) any { return map[string]any{"path": id(i), "required": true} })},
		{"spec/output", list(MaxOutputs+1, func(i int) any { return map[string]any{"path": id(i), "required": true} })},
		{"spec/output/0/path", repeat("a", MaxOutputPathLen)}, {"spec/output/0/path", repeat("a", MaxOutputPathLen+1)},
		{"spec/output/0/path", "a\tb"}, {"spec/output/0/path", "/out/x"}, {"spec/output/0/path", "a/../b"},
		{"spec/output/0/path", "./a"}, {"spec/output/0/path", "a//b"}, {"spec/output/0/path", "plots/*.png"},
		{"spec/output/0/path", ""},
		{"spec/sweep", map[string]any{"id": someJob, "index": 0, "count": 1, "value": ""}},
		{"spec/sweep", map[string]any{"id": someJob, "index": 0, "count": MaxSweep, "value": repeat("v", MaxSweepValue)}},
		{"spec/sweep", map[string]any{"id": someJob, "index": 0, "count": MaxSweep + 1, "value": "v"}},
		{"spec/sweep", map[string]any{"id": someJob, "index": 0, "count": 0, "value": "v"}},
		{"spec/sweep", map[string]any{"id": someJob, "index": -1, "count": 2, "value": "v"}},
		{"spec/sweep", map[string]any{"id": someJob, "index": 0, "count": 2, "value": repeat("v", MaxSweepValue+1)}},
		{"spec/sweep", map[string]any{"id": someJob, "index": 0, "count": 2, "value": "a\x00"}},
		{"spec/sweep", map[string]any{"id": "-x", "index": 0, "count": 2, "value": "v"}},
		{"spec/wait_for_node", true},
		{"spec/checkpoint", map[string]any{"path": "ckpt", "every_seconds": 1}},
		{"spec/checkpoint", map[string]any{"path": "ckpt", "every_seconds": 0.5}},
		{"spec/checkpoint", map[string]any{"path": "ckpt", "every_seconds": MaxCheckpointEvery.Seconds()}},
		{"spec/checkpoint", map[string]any{"path": "ckpt", "every_seconds": MaxCheckpointEvery.Seconds() + 1}},
		{"spec/checkpoint", map[string]any{"path": "a/../b", "every_seconds": 10}},
		{"spec/checkpoint", map[string]any{"path": "/out/ckpt", "every_seconds": 10}},
		{"spec/checkpoint", map[string]any{"path": repeat("a", MaxOutputPathLen), "every_seconds": 10}},
		{"spec/checkpoint", map[string]any{"path": repeat("a", MaxOutputPathLen+1), "every_seconds": 10}},
		{"spec/checkpoint", map[string]any{"path": "ckpt"}},
		{"spec/data/0", map[string]any{"name": "x", "checkpoint_of": someJob}},
		{"spec/data/0", map[string]any{"name": "x", "checkpoint_of": "../x"}},
	}
	for _, c := range cases {
		body := requestBody(t, c.path, c.value)
		schemaErr, e31Err := schemaTakes(sch, body), e31Takes(body)
		switch {
		case schemaErr == nil && e31Err != nil:
			t.Errorf("%s = %s: the schema takes it, e31 refuses it: %v", c.path, short(c.value), e31Err)
		case schemaErr != nil && e31Err == nil:
			t.Errorf("%s = %s: e31 takes it, the schema refuses it: %v", c.path, short(c.value), schemaErr)
		}
	}
}

// TestValidateRefusesWhatTheSchemaCannotSay lists the rules a JSON Schema
// cannot state (docs/submitting.md names them): the schema takes these and
// SUBMIT refuses them. Should the schema learn one, move it to
// TestSchemaAgreesWithValidate.
func TestValidateRefusesWhatTheSchemaCannotSay(t *testing.T) {
	t.Parallel()
	sch, _ := requestedSchema(t)
	digest := "sha256:" + repeat("ab", 32)
	for _, c := range []struct {
		why   string
		path  string
		value any
	}{
		{"an input both uploaded and from a job", "spec/data/0",
			map[string]any{"name": "x", "from_job": someJob, "digest": digest, "kind": "dir"}},
		{"two inputs of one name", "spec/data", []any{
			map[string]any{"name": "x", "from_job": someJob}, map[string]any{"name": "x", "from_job": someJob}}},
		{"one output declared twice", "spec/output", []any{
			map[string]any{"path": "a", "required": true}, map[string]any{"path": "a", "required": false}}},
		{"a glob path.Match cannot read", "spec/output/0/path", "a["},
		{"command and env over 256KiB together", "spec/work/env",
			map[string]any{"A": repeat("x", 100<<10), "B": repeat("x", 100<<10), "C": repeat("x", 100<<10)}},
		{"an argument over 128KiB", "spec/work/command", []any{"/bin/echo", repeat("x", 128<<10)}},
		{"a sweep index past its count", "spec/sweep", map[string]any{"id": someJob, "index": 2, "count": 2, "value": "v"}},
		{"a checkpoint that is a glob", "spec/checkpoint", map[string]any{"path": "ck*", "every_seconds": 10}},
		{"an input both from a job and a checkpoint", "spec/data/0",
			map[string]any{"name": "x", "from_job": someJob, "checkpoint_of": someJob}},
	} {
		body := requestBody(t, c.path, c.value)
		if err := schemaTakes(sch, body); err != nil {
			t.Errorf("%s: the schema now refuses it (%v): move the case to TestSchemaAgreesWithValidate", c.why, err)
		}
		if e31Takes(body) == nil {
			t.Errorf("%s: e31 takes it", c.why)
		}
	}
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}

// referenceRow is one row of the reference table: the job file's fields it
// describes, the spec's fields they become, and the whole row's text.
type referenceRow struct {
	line       int
	file, spec []string
	text       string
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// referenceTable reads the table of docs/submitting.md whose header is
// "| field | ... | in the spec |": the first column names job file fields,
// the last the spec's (JSON Schema) fields, each in backticks.
func referenceTable(t testing.TB) []referenceRow {
	t.Helper()
	f, err := os.Open(referenceDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []referenceRow
	in := false
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if !in {
			if strings.HasPrefix(line, "| field |") && strings.HasSuffix(line, "| in the spec |") {
				in = true
			}
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		if strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 3 {
			t.Fatalf("%s:%d: a row of fewer than 3 cells: %s", referenceDoc, n, line)
		}
		row := referenceRow{line: n, text: line}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[0], -1) {
			row.file = append(row.file, m[1])
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[len(cells)-1], -1) {
			row.spec = append(row.spec, m[1])
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table with the header \"| field | … | in the spec |\"", referenceDoc)
	}
	return rows
}

// fileFields is every field of a job file that holds a value, as the
// parser's tables name them: data[].name for a field of each item of data.
// The mappings and lists that hold them (work, data, …) are not rows of
// their own.
func fileFields() []string {
	var out []string
	add := func(prefix string, names []string) {
		for _, n := range names {
			out = append(out, prefix+n)
		}
	}
	names := func(s string) []string { return strings.Split(s, ", ") }
	holders := []string{"work", "data", "request", "output", "sweep", "checkpoint"}
	for _, n := range names(fieldNames(jobFields)) {
		if !slices.Contains(holders, n) {
			out = append(out, n)
		}
	}
	add("work.", names(fieldNames(workFields)))
	add("data[].", names(fieldNames(dataFields)))
	add("request.", names(fieldNames(requestFields)))
	add("output[].", names(fieldNames(outputFields)))
	add("sweep.", names(fieldNames(sweepFields)))
	add("checkpoint.", names(fieldNames(checkpointFields)))
	slices.Sort(out)
	return out
}

// specFields is every property of the schema's JobSpec that holds a value,
// nested ones as work.command and data[].digest.
func specFields(t testing.TB, defs map[string]any) []string {
	t.Helper()
	var out []string
	var walk func(prefix string, sch map[string]any)
	resolve := func(sch map[string]any) map[string]any {
		if ref, ok := sch["$ref"].(string); ok && strings.HasPrefix(ref, "#/$defs/") {
			return defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		}
		return sch
	}
	walk = func(prefix string, sch map[string]any) {
		props, _ := sch["properties"].(map[string]any)
		for name, p := range props {
			p := resolve(p.(map[string]any))
			path := prefix + name
			switch {
			case p["properties"] != nil:
				walk(path+".", p)
			case p["items"] != nil && resolve(p["items"].(map[string]any))["properties"] != nil:
				walk(path+"[].", resolve(p["items"].(map[string]any)))
			default:
				out = append(out, path)
			}
		}
	}
	walk("", defs["JobSpec"].(map[string]any))
	slices.Sort(out)
	return out
}

// fileDuration writes d as a job file would.
func fileDuration(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{Day, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.name
		}
	}
	return d.String()
}

// TestReferenceDocumentsEveryField checks docs/submitting.md's table of the
// job file against the parser and the JSON Schema: every field the parser
// reads has a row, every row is a field it reads, every property of the
// schema's JobSpec is named as where a field goes, and each row states the
// defaults and bounds this package enforces, written as a job file writes
// them.
func TestReferenceDocumentsEveryField(t *testing.T) {
	t.Parallel()
	_, defs := requestedSchema(t)
	rows := referenceTable(t)

	byField := map[string]referenceRow{}
	var documented, named []string
	for _, r := range rows {
		if len(r.file) == 0 || len(r.spec) == 0 {
			t.Errorf("%s:%d: a row must name the job file's field(s) first and the spec's last, in backticks: %s", referenceDoc, r.line, r.text)
		}
		for _, f := range r.file {
			byField[f] = r
			documented = append(documented, f)
		}
		named = append(named, r.spec...)
	}
	slices.Sort(documented)
	if want := fileFields(); !slices.Equal(documented, want) {
		t.Errorf("%s documents the job file fields\n  %v\nthe parser reads\n  %v", referenceDoc, documented, want)
	}
	spec := specFields(t, defs)
	for _, s := range spec {
		if !slices.Contains(named, s) {
			t.Errorf("%s: the schema's JobSpec has %s, which no row names as where a field goes", referenceDoc, s)
		}
	}
	for _, s := range named {
		if !slices.Contains(spec, s) {
			t.Errorf("%s: a row names %s, which the schema's JobSpec does not have", referenceDoc, s)
		}
	}

	// The values each row must state, in backticks.
	num := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	must := map[string][]string{
		"name":              {strconv.Itoa(MaxNameLen)},
		"work.image":        {strconv.Itoa(MaxImageLen)},
		"data[].name":       {strconv.Itoa(MaxDataNameLen)},
		"request.cpu":       {num(DefaultCPU), num(MinCPU), num(MaxCPU)},
		"request.memory":    {formatSize(DefaultMemory), formatSize(MinMemory), formatSize(MaxMemory)},
		"request.gpu":       {strconv.Itoa(DefaultGPU), strconv.Itoa(MaxGPU)},
		"request.disk":      {formatSize(DefaultDisk), formatSize(MinDisk), formatSize(MaxDisk)},
		"request.limit":     {fileDuration(MaxLimit)},
		"output[].path":     {strconv.Itoa(MaxOutputPathLen), strconv.Itoa(MaxOutputs)},
		"priority":          {strconv.Itoa(events.MinPriority), strconv.Itoa(events.MaxPriority)},
		"after":             {strconv.Itoa(MaxAfter)},
		"sweep.values":      {strconv.Itoa(MaxSweep), strconv.Itoa(MaxSweepValue)},
		"sweep.count":       {strconv.Itoa(MaxSweep)},
		"retention":         {fileDuration(MinRetention), fileDuration(MaxRetention), fileDuration(events.DefaultRetention)},
		"data[].path":       {strconv.Itoa(MaxData)},
		"data[].from_job":   {strconv.Itoa(MaxData)},
		"checkpoint.path":   {strconv.Itoa(MaxOutputPathLen)},
		"checkpoint.every":  {fileDuration(MinCheckpointEvery), fileDuration(MaxCheckpointEvery)},
		"output[].required": {"true"},
	}
	for field, values := range must {
		r, ok := byField[field]
		if !ok {
			continue // reported above
		}
		for _, v := range values {
			if !strings.Contains(r.text, "`"+v+"`") {
				t.Errorf("%s:%d: the row of %s must state `%s`", referenceDoc, r.line, field, v)
			}
		}
	}
	// The durations are written so that the parser reads them back.
	for _, d := range []time.Duration{MaxLimit, MinRetention, MaxRetention, events.DefaultRetention, MinCheckpointEvery, MaxCheckpointEvery} {
		if got, why := parseDuration(fileDuration(d)); why != "" || got != d {
			t.Errorf("%s reads as %v (%s), not %v", fileDuration(d), got, why, d)
		}
	}
}
