package jobfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
)

// dir is where the test job files "live"; Parse never touches it.
const dir = "/home/u/jobs"

// request is the default request with the given limit.
func request(limitSeconds float64) events.Request {
	return events.Request{CPU: 1, MemoryBytes: 512 * MiB, GPU: 0, DiskBytes: GiB, LimitSeconds: limitSeconds}
}

// designExample is the job file of DESIGN.md.
const designExample = `name: count-clips                 # optional label
work:
  command: ["/bin/sh", "-c", "ls /data/clips | wc -l > /out/count.txt"]
  env: {LANG: C}                  # optional
data:                             # optional; staged before the job may run
  - name: clips                   # appears at /data/clips
    path: ./clips                 # a local file or folder, uploaded by the CLI
  - name: model
    from_job: JOB_ID              # the output of an earlier, succeeded job
request:
  cpu: 1                          # cores, fractions allowed
  memory: 512MiB
  gpu: 0
  limit: 10m                      # hard wall-clock limit: required
output:                           # paths or globs under /out
  - count.txt
`

var designSpec = events.JobSpec{
	Name: "count-clips",
	Work: events.Work{
		Command: []string{"/bin/sh", "-c", "ls /data/clips | wc -l > /out/count.txt"},
		Env:     map[string]string{"LANG": "C"},
	},
	Data:    []events.DataRef{{Name: "clips"}, {Name: "model", FromJob: "JOB_ID"}},
	Request: request(600),
	Output:  []events.OutputDecl{{Path: "count.txt", Required: true}},
}

func TestParseValid(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		src   string
		spec  events.JobSpec
		paths map[int]string
	}{
		{
			name:  "design example",
			src:   designExample,
			spec:  designSpec,
			paths: map[int]string{0: "/home/u/jobs/clips"},
		},
		{
			name: "design example as JSON",
			src: `{
  "name": "count-clips",
  "work": {"command": ["/bin/sh", "-c", "ls /data/clips | wc -l > /out/count.txt"], "env": {"LANG": "C"}},
  "data": [{"name": "clips", "path": "./clips"}, {"name": "model", "from_job": "JOB_ID"}],
  "request": {"cpu": 1, "memory": "512MiB", "gpu": 0, "limit": "10m"},
  "output": ["count.txt"]
}`,
			spec:  designSpec,
			paths: map[int]string{0: "/home/u/jobs/clips"},
		},
		{
			name: "compact JSON with numbers",
			src:  `{"work":{"command":["a"]},"request":{"cpu":1e1,"memory":1048576,"gpu":2,"disk":"2GB","limit":90.5}}`,
			spec: events.JobSpec{
				Work:    events.Work{Command: []string{"a"}},
				Request: events.Request{CPU: 10, MemoryBytes: MiB, GPU: 2, DiskBytes: 2e9, LimitSeconds: 90.5},
			},
		},
		{
			name: "minimal, defaults filled in",
			src:  "work:\n  command: [true]\nrequest:\n  limit: 10m\n",
			spec: events.JobSpec{Work: events.Work{Command: []string{"true"}}, Request: request(600)},
		},
		{
			name: "command as one string runs under /bin/sh -c",
			src:  "work: {command: 'ls /data | wc -l > /out/n'}\nrequest: {limit: 1h}\n",
			spec: events.JobSpec{Work: events.Work{Command: []string{"/bin/sh", "-c", "ls /data | wc -l > /out/n"}}, Request: request(3600)},
		},
		{
			name: "command as a block of text",
			src:  "work:\n  command: |\n    set -e\n    echo hi > /out/hi\nrequest: {limit: 60}\n",
			spec: events.JobSpec{Work: events.Work{Command: []string{"/bin/sh", "-c", "set -e\necho hi > /out/hi\n"}}, Request: request(60)},
		},
		{
			name: "scalars in strings are taken as written",
			src:  "name: 2024\nwork:\n  command: [echo, 1, 1.0, yes, True, 0x10, .inf, '', \"\"]\n  env: {N: 1, F: 1.50, B: false, E: '', S: \"x y\"}\nrequest: {limit: 1d}\n",
			spec: events.JobSpec{
				Name: "2024",
				Work: events.Work{
					Command: []string{"echo", "1", "1.0", "yes", "True", "0x10", ".inf", "", ""},
					Env:     map[string]string{"N": "1", "F": "1.50", "B": "false", "E": "", "S": "x y"},
				},
				Request: request(86400),
			},
		},
		{
			name: "every request field",
			src:  "work: {command: [a]}\nrequest:\n  cpu: 0.5\n  memory: 2GB\n  gpu: 1\n  disk: 10GiB\n  limit: 1h30m\n",
			spec: events.JobSpec{
				Work:    events.Work{Command: []string{"a"}},
				Request: events.Request{CPU: 0.5, MemoryBytes: 2e9, GPU: 1, DiskBytes: 10 * GiB, LimitSeconds: 5400},
			},
		},
		{
			name: "limits at their bounds",
			src:  "work: {command: [a]}\nrequest: {cpu: 0.01, memory: 1MiB, disk: 1MiB, gpu: 64, limit: 30d}\n",
			spec: events.JobSpec{
				Work:    events.Work{Command: []string{"a"}},
				Request: events.Request{CPU: 0.01, MemoryBytes: MiB, GPU: 64, DiskBytes: MiB, LimitSeconds: 30 * 86400},
			},
		},
		{
			name: "outputs in both forms",
			src: `work: {command: [a]}
request: {limit: 1s}
output:
  - count.txt
  - "*.csv"
  - logs/*.txt
  - {path: model.bin, required: false}
  - path: report.html
    required: true
  - {path: 'plots/[a-c]?.png'}
`,
			spec: events.JobSpec{
				Work:    events.Work{Command: []string{"a"}},
				Request: request(1),
				Output: []events.OutputDecl{
					{Path: "count.txt", Required: true},
					{Path: "*.csv", Required: true},
					{Path: "logs/*.txt", Required: true},
					{Path: "model.bin", Required: false},
					{Path: "report.html", Required: true},
					{Path: "plots/[a-c]?.png", Required: true},
				},
			},
		},
		{
			name: "data paths resolve against the job file's folder",
			src: `work: {command: [a]}
request: {limit: 1s}
data:
  - {name: a, path: clips}
  - {name: b.tar.gz, path: ../shared/./b.tar.gz}
  - {name: c_1, path: /srv/data/c/}
  - {name: d-2, from_job: 01HZX-job_7}
  - {name: 42, path: '.'}
`,
			spec: events.JobSpec{
				Work:    events.Work{Command: []string{"a"}},
				Request: request(1),
				Data:    []events.DataRef{{Name: "a"}, {Name: "b.tar.gz"}, {Name: "c_1"}, {Name: "d-2", FromJob: "01HZX-job_7"}, {Name: "42"}},
			},
			paths: map[int]string{0: "/home/u/jobs/clips", 1: "/home/u/shared/b.tar.gz", 2: "/srv/data/c", 4: "/home/u/jobs"},
		},
		{
			name: "null and empty optional fields are left out",
			src:  "name:\nwork:\n  command: [a]\n  env:\n  image:\ndata:\noutput: []\nrequest:\n  cpu:\n  memory: ~\n  gpu: null\n  disk:\n  limit: 5m\n",
			spec: events.JobSpec{Work: events.Work{Command: []string{"a"}}, Request: request(300)},
		},
		{
			name: "empty collections normalize to nothing",
			src:  `{"name": "", "work": {"command": ["a"], "env": {}, "image": ""}, "data": [], "output": [], "request": {"limit": 1}}`,
			spec: events.JobSpec{Work: events.Work{Command: []string{"a"}}, Request: request(1)},
		},
		{
			name: "image, unicode label, byte order mark, directive and document markers",
			src:  "\xef\xbb\xbf%YAML 1.2\n---\nname: \"Zählung 📊\"\nwork: {command: [a], image: 'ghcr.io/org/tool@sha256:0123'}\nrequest: {limit: 1}\n...\n",
			spec: events.JobSpec{
				Name:    "Zählung 📊",
				Work:    events.Work{Command: []string{"a"}, Image: "ghcr.io/org/tool@sha256:0123"},
				Request: request(1),
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			job, err := Parse("job.yaml", []byte(c.src), dir)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := &Job{Spec: c.spec, Paths: c.paths, Dir: dir}
			if want.Paths == nil {
				want.Paths = map[int]string{}
			}
			if !reflect.DeepEqual(job, want) {
				t.Errorf("Parse =\n%#v\nwant\n%#v", job, want)
			}
		})
	}
}

// TestParseBriefExample is the message format the package promises, with
// three problems reported at once, sorted by position.
func TestParseReportsEveryProblem(t *testing.T) {
	t.Parallel()
	src := `name: x
work:
    command: [a]
    comand: [b]
request:
  # limit is missing
  cpu: 1
  gpu: 0
  memory: lots
`
	_, err := Parse("job.yaml", []byte(src), dir)
	want := `job.yaml:4:5: work.comand: unknown field (expected one of: command, env, image)
job.yaml:7:3: request.limit: required (a duration such as 10m)
job.yaml:9:11: request.memory: "lots" is not a size (expected e.g. 512MiB or 2GB)`
	if err == nil || err.Error() != want {
		t.Fatalf("Parse error:\n%v\nwant:\n%s", err, want)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error is %T, want *Error", err)
	}
	wantProblems := []Problem{
		{File: "job.yaml", Line: 4, Column: 5, Path: "work.comand", Message: "unknown field (expected one of: command, env, image)"},
		{File: "job.yaml", Line: 7, Column: 3, Path: "request.limit", Message: "required (a duration such as 10m)"},
		{File: "job.yaml", Line: 9, Column: 11, Path: "request.memory", Message: `"lots" is not a size (expected e.g. 512MiB or 2GB)`},
	}
	if !reflect.DeepEqual(e.Problems, wantProblems) {
		t.Errorf("Problems =\n%#v\nwant\n%#v", e.Problems, wantProblems)
	}
	if got := e.Lines(); !reflect.DeepEqual(got, strings.Split(want, "\n")) {
		t.Errorf("Lines = %q", got)
	}
}

func TestParseInvalid(t *testing.T) {
	t.Parallel()
	// ok is a valid start that cases append their trouble to.
	const ok = "work: {command: [a]}\nrequest: {limit: 1}\n"
	cases := []struct {
		name, src, want string
	}{
		// The file as a whole.
		{"empty", "", `job.yaml: file is empty (a job needs at least work.command and request.limit)`},
		{"blank", "  \n\n", `job.yaml: file is empty (a job needs at least work.command and request.limit)`},
		{"comments only", "# a\n---\n# b\n", `job.yaml: file is empty (a job needs at least work.command and request.limit)`},
		{"too large", ok + "#" + strings.Repeat("x", MaxFileBytes), `job.yaml: file is larger than 1MiB; a job file is a few hundred bytes, data goes under data:`},
		{"not UTF-8", ok + "name: café\xe9\n", `job.yaml:3:11: file is not valid UTF-8`},
		{"nested too deep (flow)", "name: " + strings.Repeat("[", 40), `job.yaml:1:38: nested more than 32 levels deep`},
		{"nested too deep (block)", "name:\n" + strings.Repeat("- ", 40) + "x\n", `job.yaml:2:65: nested more than 32 levels deep`},
		{"too many tokens", ok + "output: [" + strings.Repeat("a,", MaxTokens/2) + "]\n", `job.yaml:3:19991: file has more than 20000 YAML tokens; a job file has a few hundred`},
		{"syntax error", "work: {command: [a}\n", `job.yaml:1:19: invalid YAML: ',' or ']' must be specified`},
		{"two documents", ok + "---\n" + ok, `job.yaml:4:1: a job file holds one YAML document, this is a second`},
		{"a list", "- work\n", `job.yaml:1:1: expected a mapping with work and request (and optionally name, data, output), got a list`},
		{"a string", "work", `job.yaml:1:1: expected a mapping with work and request (and optionally name, data, output), got "work"`},

		// Keys.
		{"unknown top-level field", ok + "priorty: 1\n", `job.yaml:3:1: priorty: unknown field (expected one of: after, checkpoint, data, name, output, priority, request, retention, sweep, wait_for_node, work)`},
		{"unknown odd key", ok + "\"a b\": 1\n", `job.yaml:3:1: ["a b"]: unknown field (expected one of: after, checkpoint, data, name, output, priority, request, retention, sweep, wait_for_node, work)`},
		{"duplicate top-level key", ok + "work: {command: [b]}\n", `job.yaml:3:1: work: duplicate key (first given at 1:1)`},
		{"duplicate key in JSON", `{"work": {"command": ["a"], "command": ["b"]}, "request": {"limit": 1}}`, `job.yaml:1:29: work.command: duplicate key (first given at 1:11)`},
		{"anchor and alias", "work: &w {command: [a]}\nrequest: {limit: *w}\n", `job.yaml:1:7: work: YAML anchors (&name) are not supported in a job file
job.yaml:2:18: request.limit: YAML aliases (*name) are not supported in a job file`},
		{"tag", ok + "name: !!str 5\n", `job.yaml:3:7: name: YAML tags (!!str) are not supported in a job file; quote the value instead`},
		{"merge key", ok + "<<: {name: x}\n", `job.yaml:3:1: YAML merge keys (<<) are not supported in a job file`},
		{"complex key", ok + "? name\n: x\n", `job.yaml:3:1: a key must be a plain name`},

		// Sections of the wrong type or missing.
		{"work and request missing", "name: x\n", `job.yaml:1:1: work.command: required (a list of strings, e.g. ["/bin/sh", "-c", "echo hi"], or one string run by /bin/sh -c)
job.yaml:1:1: request.limit: required (a duration such as 10m)`},
		{"sections of the wrong type", "work: [a]\nrequest: 5\ndata: {a: b}\noutput: x\nname: [x]\n", `job.yaml:1:7: work: expected a mapping with command (and optionally env, image), got a list
job.yaml:2:10: request: expected a mapping with limit (and optionally cpu, memory, gpu, disk), got 5
job.yaml:3:7: data: expected a list of {name, path}, {name, from_job} or {name, checkpoint_of}, got a mapping
job.yaml:4:9: output: expected a list of paths or globs under /out, got "x"
job.yaml:5:7: name: expected a short label, got a list`},

		// work
		{"command missing", "work: {env: {A: b}}\nrequest: {limit: 1}\n", `job.yaml:1:7: work.command: required (a list of strings, e.g. ["/bin/sh", "-c", "echo hi"], or one string run by /bin/sh -c)`},
		{"command empty list", "work: {command: []}\nrequest: {limit: 1}\n", `job.yaml:1:17: work.command: must not be empty (a list of strings, e.g. ["/bin/sh", "-c", "echo hi"], or one string run by /bin/sh -c)`},
		{"command empty string", "work: {command: '  '}\nrequest: {limit: 1}\n", `job.yaml:1:17: work.command: must not be empty (a list of strings, e.g. ["/bin/sh", "-c", "echo hi"], or one string run by /bin/sh -c)`},
		{"command of the wrong type", "work: {command: {a: b}}\nrequest: {limit: 1}\n", `job.yaml:1:17: work.command: expected a list of strings, e.g. ["/bin/sh", "-c", "echo hi"], or one string run by /bin/sh -c, got a mapping`},
		{"command items", "work: {command: ['', ~, [b], {c: d}, \"x\\0y\"]}\nrequest: {limit: 1}\n", `job.yaml:1:18: work.command[0]: must not be empty (it is the program to run)
job.yaml:1:22: work.command[1]: expected a string, got null
job.yaml:1:25: work.command[2]: expected a string, got a list
job.yaml:1:30: work.command[3]: expected a string, got a mapping
job.yaml:1:38: work.command[4]: must not contain a NUL byte`},
		{"command string with NUL", "work: {command: \"a\\0\"}\nrequest: {limit: 1}\n", `job.yaml:1:17: work.command: must not contain a NUL byte`},
		{"argument too long", "work: {command: [a, " + strings.Repeat("x", 128*1024) + "]}\nrequest: {limit: 1}\n", `job.yaml:1:21: work.command[1]: is longer than 128KiB, the kernel's limit for one string`},
		{"command and env too large together", "work:\n  command: [a]\n  env: {A: " + strings.Repeat("x", 100*1024) + ", B: " + strings.Repeat("x", 100*1024) + ", C: " + strings.Repeat("x", 100*1024) + "}\nrequest: {limit: 1}\n", `job.yaml:2:3: work: command and env together take 307211 bytes, more than the 256KiB a job may pass to its program`},
		{"env problems", "work:\n  command: [a]\n  env:\n    E31_JOB_ID: x\n    1A: b\n    A-B: c\n    OK: \n    L: [x]\n    OK: again\nrequest: {limit: 1}\n", `job.yaml:4:5: work.env.E31_JOB_ID: "E31_JOB_ID" is reserved (e31 sets the E31_ variables)
job.yaml:5:5: work.env.1A: "1A" is not a variable name (letters, digits and '_', not starting with a digit)
job.yaml:6:5: work.env.A-B: "A-B" is not a variable name (letters, digits and '_', not starting with a digit)
job.yaml:7:8: work.env.OK: expected a string (write "" for an empty one), got null
job.yaml:8:8: work.env.L: expected a string (write "" for an empty one), got a list
job.yaml:9:5: work.env.OK: duplicate key (first given at 7:5)`},
		{"env of the wrong type", "work: {command: [a], env: [A=b]}\nrequest: {limit: 1}\n", `job.yaml:1:27: work.env: expected a mapping of variable names to strings, e.g. {LANG: C}, got a list`},
		{"image", "work: {command: [a], image: -v}\nrequest: {limit: 1}\n", `job.yaml:1:29: work.image: "-v" is not an image reference (e.g. alpine:3.20 or ghcr.io/org/tool@sha256:…)`},
		{"image with space", "work: {command: [a], image: 'alpine latest'}\nrequest: {limit: 1}\n", `job.yaml:1:29: work.image: "alpine latest" is not an image reference (e.g. alpine:3.20 or ghcr.io/org/tool@sha256:…)`},

		// data
		{"data entries", ok + `data:
  - {name: a/b, path: x}
  - {name: ., path: x}
  - {name: .., path: x}
  - {name: '', path: x}
  - {path: x}
  - {name: a, path: x, from_job: j}
  - {name: b}
  - {name: c, from_job: 'no/such id'}
  - {name: d, path: ''}
  - {name: e, path: ~/clips}
  - {name: f, path: x, size: 5}
  - 5
  - ~
`, `job.yaml:4:12: data[0].name: "a/b" must be a plain name (letters, digits, '.', '-', '_')
job.yaml:5:12: data[1].name: "." must be a plain name, not "." or ".."
job.yaml:6:12: data[2].name: ".." must be a plain name, not "." or ".."
job.yaml:7:12: data[3].name: must not be empty
job.yaml:8:5: data[4].name: required (a plain name such as clips, for /data/clips)
job.yaml:9:5: data[5]: give one of path, from_job and checkpoint_of, not several
job.yaml:10:5: data[6]: needs path (a local file or folder), from_job (the id of an earlier job) or checkpoint_of (the id of a job whose last checkpoint is staged)
job.yaml:11:25: data[7].from_job: "no/such id" is not a job id (letters, digits, '-' and '_', at most 64)
job.yaml:12:21: data[8].path: must not be empty (a local file or folder)
job.yaml:13:21: data[9].path: ~ is not expanded in a job file (write the full path, or one relative to the job file)
job.yaml:14:24: data[10].size: unknown field (expected one of: checkpoint_of, from_job, name, path)
job.yaml:15:5: data[11]: expected a mapping with name and one of path, from_job, checkpoint_of, got 5
job.yaml:16:5: data[12]: expected a mapping with name and one of path, from_job, checkpoint_of, got null`},
		{"data names are unique", ok + "data:\n  - {name: a, path: x}\n  - {name: b, path: y}\n  - {name: a, from_job: j}\n", `job.yaml:6:12: data[2].name: "a" is already the name of data[0]`},
		{"data name too long", ok + "data: [{name: " + strings.Repeat("n", 129) + ", path: x}]\n", `job.yaml:3:15: data[0].name: is longer than 128 characters`},
		{"too many data entries", ok + "data: [" + strings.Repeat("{name: a, path: x},", MaxData+1) + "]\n", `job.yaml:3:7: data: has 257 entries, more than 256`},

		// request
		{"request missing", "work: {command: [a]}\n", `job.yaml:1:1: request.limit: required (a duration such as 10m)`},
		{"limit null", "work: {command: [a]}\nrequest:\n  limit:\n", `job.yaml:3:10: request.limit: required (a duration such as 10m)`},
		{"request bounds", "work: {command: [a]}\nrequest:\n  cpu: 0\n  memory: 65TiB\n  gpu: -1\n  disk: 0\n  limit: 31d\n", `job.yaml:3:8: request.cpu: must be at least 0.01 (a hundredth of a core), got 0
job.yaml:4:11: request.memory: must be at most 64TiB, got 65TiB
job.yaml:5:8: request.gpu: must not be negative, got -1
job.yaml:6:9: request.disk: must be at least 1MiB, got 0B
job.yaml:7:10: request.limit: must be at most 30d, got 31d`},
		{"request bounds again", "work: {command: [a]}\nrequest:\n  cpu: 4097\n  memory: 1KiB\n  gpu: 65\n  disk: 2PiB\n  limit: 0\n", `job.yaml:3:8: request.cpu: must be at most 4096, got 4097
job.yaml:4:11: request.memory: must be at least 1MiB, got 1KiB
job.yaml:5:8: request.gpu: must be at most 64, got 65
job.yaml:6:9: request.disk: must be at most 1PiB, got 2PiB
job.yaml:7:10: request.limit: must be more than 0, got 0s`},
		{"request types", "work: {command: [a]}\nrequest:\n  cpu: '1'\n  memory: [1]\n  gpu: one\n  disk: true\n  limit: {m: 10}\n", `job.yaml:3:8: request.cpu: expected a number of cores such as 1 or 0.5, got "1"
job.yaml:4:11: request.memory: expected a size such as 512MiB or 2GB, got a list
job.yaml:5:8: request.gpu: expected a whole number of GPUs such as 0 or 1, got "one"
job.yaml:6:9: request.disk: "true" is not a size (expected e.g. 512MiB or 2GB)
job.yaml:7:10: request.limit: expected a duration such as 10m, got a mapping`},
		{"request oddities", "work: {command: [a]}\nrequest:\n  cpu: .nan\n  memory: 512M\n  gpu: 1.5\n  disk: -1GiB\n  limit: -5m\n", `job.yaml:3:8: request.cpu: must be a finite number, got .nan
job.yaml:4:11: request.memory: "512M" is not a size ("M" is ambiguous: write 512MB or 512MiB)
job.yaml:5:8: request.gpu: must be a whole number, got 1.5
job.yaml:6:9: request.disk: "-1GiB" is not a size (must not be negative)
job.yaml:7:10: request.limit: "-5m" is not a duration (must not be negative)`},
		{"request more oddities", "work: {command: [a]}\nrequest:\n  cpu: .inf\n  memory: 1e9\n  gpu: 18446744073709551615\n  disk: 9999999PiB\n  limit: soon\n", `job.yaml:3:8: request.cpu: must be a finite number, got .inf
job.yaml:4:11: request.memory: "1e9" is not a size (expected e.g. 512MiB or 2GB)
job.yaml:5:8: request.gpu: must be at most 64, got 1.8446744073709552e+19
job.yaml:6:9: request.disk: "9999999PiB" is not a size (too large)
job.yaml:7:10: request.limit: "soon" is not a duration (expected e.g. 10m, 1h30m, 2d or 90 for seconds)`},

		// output
		{"output paths", ok + `output:
  - /out/a.txt
  - /etc/passwd
  - ../x
  - a/../../x
  - .
  - ./a
  - a//b
  - b/
  - "[a"
  - ""
  - "a\tb"
  - ~
  - [x]
`, `job.yaml:4:5: output[0]: "/out/a.txt" must be relative to /out (write "a.txt")
job.yaml:5:5: output[1]: "/etc/passwd" must be relative to /out, not absolute
job.yaml:6:5: output[2]: "../x" must stay under /out (no "..")
job.yaml:7:5: output[3]: "a/../../x" must stay under /out (no "..")
job.yaml:8:5: output[4]: "." must name something under /out
job.yaml:9:5: output[5]: "./a" is not clean (write "a")
job.yaml:10:5: output[6]: "a//b" is not clean (write "a/b")
job.yaml:11:5: output[7]: "b/" is not clean (write "b")
job.yaml:12:5: output[8]: "[a" is not a valid glob (path.Match syntax: *, ?, [a-z], \ to escape)
job.yaml:13:5: output[9]: must not be empty (a path or glob under /out)
job.yaml:14:5: output[10]: "a\tb" must not contain control characters
job.yaml:15:5: output[11]: expected a path or glob under /out, or {path, required}, got null
job.yaml:16:5: output[12]: expected a path or glob under /out, or {path, required}, got a list`},
		{"output entries", ok + `output:
  - {path: a, required: yes}
  - {path: b, required: "true"}
  - {required: false}
  - {path: c, optional: true}
  - x
  - {path: x}
`, `job.yaml:4:25: output[0].required: expected true or false, got "yes"
job.yaml:5:25: output[1].required: expected true or false, got "true"
job.yaml:6:5: output[2].path: required (a path or glob under /out)
job.yaml:7:15: output[3].optional: unknown field (expected one of: path, required)
job.yaml:9:12: output[5].path: "x" is already declared by output[4]`},
		{"output long form", ok + "output:\n  - {path: /out/a}\n  - {path: [a]}\n  - {path: &p b}\n  - !!str c\n", `job.yaml:4:12: output[0].path: "/out/a" must be relative to /out (write "a")
job.yaml:5:12: output[1].path: expected a path or glob under /out, got a list
job.yaml:6:12: output[2].path: YAML anchors (&name) are not supported in a job file
job.yaml:7:5: output[3]: YAML tags (!!str) are not supported in a job file; quote the value instead`},
		{"data paths of the wrong kind", ok + "data:\n  - {name: a, path: [x]}\n  - {name: b, path: \"x\\0\"}\n  - {name: [c], from_job: {j: 1}}\n", `job.yaml:4:21: data[0].path: expected a local file or folder, got a list
job.yaml:5:21: data[1].path: must not contain a NUL byte
job.yaml:6:12: data[2].name: expected a plain name such as clips, for /data/clips, got a list
job.yaml:6:27: data[2].from_job: expected a job id, got a mapping`},
		{"env keys that are not names", "work: {command: [a], env: {1: x, true: y, \"\\xe9t\\xe9\": z}}\nrequest: {limit: 1}\n", `job.yaml:1:28: work.env.1: "1" is not a variable name (letters, digits and '_', not starting with a digit)
job.yaml:1:43: work.env["été"]: "été" is not a variable name (letters, digits and '_', not starting with a digit)`},
		{"image too long", "work: {command: [a], image: " + strings.Repeat("i", MaxImageLen+1) + "}\nrequest: {limit: 1}\n", `job.yaml:1:29: work.image: is longer than 512 bytes`},
		{"too many outputs", ok + "output: [" + strings.Repeat("a,", MaxOutputs+1) + "]\n", `job.yaml:3:9: output: has 257 entries, more than 256`},

		// name
		{"name too long", ok + "name: " + strings.Repeat("é", 129) + "\n", `job.yaml:3:7: name: is longer than 128 characters`},
		{"name with a control character", ok + "name: \"a\\nb\"\n", `job.yaml:3:7: name: must not contain control characters`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			job, err := Parse("job.yaml", []byte(c.src), dir)
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", job)
			}
			if job != nil {
				t.Errorf("Parse returned a job with its error")
			}
			if err.Error() != c.want {
				t.Errorf("Parse error:\n%v\nwant:\n%s", err, c.want)
			}
		})
	}
}

func TestParseFile(t *testing.T) {
	t.Parallel()
	d := t.TempDir()
	name := filepath.Join(d, "job.yaml")
	if err := os.WriteFile(name, []byte(designExample), 0o644); err != nil {
		t.Fatal(err)
	}
	job, err := ParseFile(name)
	if err != nil {
		t.Fatal(err)
	}
	want := &Job{Spec: designSpec, Paths: map[int]string{0: filepath.Join(d, "clips")}, Dir: d}
	if !reflect.DeepEqual(job, want) {
		t.Errorf("ParseFile =\n%#v\nwant\n%#v", job, want)
	}
}

func TestParseFileErrors(t *testing.T) {
	t.Parallel()
	d := t.TempDir()

	_, err := ParseFile(filepath.Join(d, "missing.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}

	big := filepath.Join(d, "big.yaml")
	if err := os.WriteFile(big, make([]byte, 3*MaxFileBytes), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ParseFile(big)
	if want := big + ": file is larger than 1MiB; a job file is a few hundred bytes, data goes under data:"; err == nil || err.Error() != want {
		t.Errorf("big file: %v, want %s", err, want)
	}

	bad := filepath.Join(d, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"work": {"command": ["a"]}, "data": [{"name": "ok", "path": "x"}, {"name": "a/b", "path": "y"}], "request": {"limit": "10m"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ParseFile(bad)
	if want := bad + `:1:77: data[1].name: "a/b" must be a plain name (letters, digits, '.', '-', '_')`; err == nil || err.Error() != want {
		t.Errorf("bad file: %v, want %s", err, want)
	}
}

// TestParseRelativeDir resolves data paths from the current directory when
// the job file's folder is given relative, or not at all.
func TestParseRelativeDir(t *testing.T) {
	d := t.TempDir()
	t.Chdir(d)
	src := []byte("work: {command: [a]}\nrequest: {limit: 1}\ndata: [{name: a, path: x}]\n")
	for _, in := range []string{"", ".", "sub/.."} {
		job, err := Parse("job.yaml", src, in)
		if err != nil {
			t.Fatal(err)
		}
		if job.Dir != d || job.Paths[0] != filepath.Join(d, "x") {
			t.Errorf("Parse with dir %q: Dir %q, Paths %v; want %q", in, job.Dir, job.Paths, d)
		}
	}
	if err := os.WriteFile("job.yaml", src, 0o644); err != nil {
		t.Fatal(err)
	}
	job, err := ParseFile("job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if job.Dir != d {
		t.Errorf("ParseFile(relative): Dir %q, want %q", job.Dir, d)
	}
}

// TestTooManyProblems keeps one bad file (or one hostile spec) from turning
// into an endless error.
func TestTooManyProblems(t *testing.T) {
	t.Parallel()
	src := "work: {command: [a]}\nrequest: {limit: 1}\n" + strings.Repeat("x: 1\n", MaxProblems+10)
	_, err := Parse("job.yaml", []byte(src), dir)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Parse: %v", err)
	}
	if len(e.Problems) != MaxProblems+1 {
		t.Fatalf("%d problems, want %d", len(e.Problems), MaxProblems+1)
	}
	if got, want := e.Problems[MaxProblems-1].String(), "job.yaml:52:1: x: unknown field (expected one of: after, checkpoint, data, name, output, priority, request, retention, sweep, wait_for_node, work)"; got != want {
		t.Errorf("last problem listed: %s, want %s", got, want)
	}
	if got, want := e.Problems[MaxProblems].String(), "job.yaml: and 10 more problems"; got != want {
		t.Errorf("count of the rest: %s, want %s", got, want)
	}

	spec := staged()
	spec.Output = nil
	for range MaxOutputs {
		spec.Output = append(spec.Output, events.OutputDecl{Path: "/x"})
	}
	err = Validate(spec)
	if !errors.As(err, &e) {
		t.Fatalf("Validate: %v", err)
	}
	if len(e.Problems) != MaxProblems+1 || e.Problems[MaxProblems].String() != "and 206 more problems" {
		t.Errorf("Validate listed %d problems, the last %q", len(e.Problems), e.Problems[len(e.Problems)-1])
	}
}

func BenchmarkParse(b *testing.B) {
	src := []byte(designExample)
	for b.Loop() {
		if _, err := Parse("job.yaml", src, dir); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseWorstCase is a file at the token bound in the shape the
// YAML parser handles worst (one block mapping with many keys): what the
// bounds let a bad file cost.
func BenchmarkParseWorstCase(b *testing.B) {
	src := []byte(strings.Repeat("k: v\n", MaxTokens/3))
	for b.Loop() {
		if _, err := Parse("job.yaml", src, dir); err == nil {
			b.Fatal("accepted")
		}
	}
}
