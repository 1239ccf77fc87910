package jobfile

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/events"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// staged is the design example after the CLI uploaded its data.
func staged() events.JobSpec {
	s := designSpec
	s.Work.Env = map[string]string{"LANG": "C"}
	s.Data = []events.DataRef{
		{Name: "clips", Digest: digest, Kind: KindDir, Bytes: 1 << 20, Files: 12},
		{Name: "model", FromJob: "JOB_ID"},
	}
	s.Output = []events.OutputDecl{{Path: "count.txt", Required: true}, {Path: "logs/*.txt"}}
	return s
}

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	if err := Validate(staged()); err != nil {
		t.Errorf("Validate(staged example): %v", err)
	}
	s := staged()
	s.Work.Image = "ghcr.io/org/tool@sha256:0123"
	s.Request = events.Request{CPU: MinCPU, MemoryBytes: MaxMemory, GPU: MaxGPU, DiskBytes: MinDisk, LimitSeconds: MaxLimit.Seconds()}
	if err := Validate(s); err != nil {
		t.Errorf("Validate(bounds): %v", err)
	}
}

// TestValidateRefuses feeds Validate the specs a hostile publisher could
// put on the bus.
func TestValidateRefuses(t *testing.T) {
	t.Parallel()
	hugeEnv := map[string]string{}
	for i := range 300 {
		hugeEnv["V"+strconv.Itoa(i)] = strings.Repeat("x", 1000)
	}
	manyData := make([]events.DataRef, MaxData+1)
	for i := range manyData {
		manyData[i] = events.DataRef{Name: "d" + strconv.Itoa(i), FromJob: "j"}
	}
	cases := []struct {
		name string
		edit func(s *events.JobSpec)
		want string
	}{
		{"zero spec", func(s *events.JobSpec) { *s = events.JobSpec{} }, `work.command: required (a list of strings, e.g. ["/bin/sh", "-c", "echo hi"], or one string run by /bin/sh -c)
request.cpu: must be at least 0.01 (a hundredth of a core), got 0
request.memory_bytes: must be at least 1MiB, got 0B
request.disk_bytes: must be at least 1MiB, got 0B
request.limit_seconds: must be more than 0, got 0s`},
		{"empty command", func(s *events.JobSpec) { s.Work.Command = []string{} }, `work.command: required (a list of strings, e.g. ["/bin/sh", "-c", "echo hi"], or one string run by /bin/sh -c)`},
		{"command arguments", func(s *events.JobSpec) {
			s.Work.Command = []string{"", "a\x00b", "\xff", strings.Repeat("x", 128*1024)}
		}, `work.command[0]: must not be empty (it is the program to run)
work.command[1]: must not contain a NUL byte
work.command[2]: must be valid UTF-8
work.command[3]: is longer than 128KiB, the kernel's limit for one string`},
		{"huge env", func(s *events.JobSpec) { s.Work.Env = hugeEnv }, `work: command and env together take 301741 bytes, more than the 256KiB a job may pass to its program`},
		{"env names and values", func(s *events.JobSpec) {
			s.Work.Env = map[string]string{"E31_DATA": "/", "": "x", "A B": "x", "OK": "a\x00", "É": "x"}
		}, `work.env[""]: "" is not a variable name (letters, digits and '_', not starting with a digit)
work.env["A B"]: "A B" is not a variable name (letters, digits and '_', not starting with a digit)
work.env.E31_DATA: "E31_DATA" is reserved (e31 sets the E31_ variables)
work.env.OK: must not contain a NUL byte
work.env["É"]: "É" is not a variable name (letters, digits and '_', not starting with a digit)`},
		{"image that is a flag", func(s *events.JobSpec) { s.Work.Image = "--privileged" }, `work.image: "--privileged" is not an image reference (e.g. alpine:3.20 or ghcr.io/org/tool@sha256:…)`},
		{"label", func(s *events.JobSpec) { s.Name = "a\x1b[31mred" }, `name: must not contain control characters`},
		{"label too long", func(s *events.JobSpec) { s.Name = strings.Repeat("x", 129) }, `name: is longer than 128 characters`},
		{"label not UTF-8", func(s *events.JobSpec) { s.Name = "caf\xe9" }, `name: must be valid UTF-8`},
		{"negative memory and disk", func(s *events.JobSpec) { s.Request.MemoryBytes, s.Request.DiskBytes = -5, math.MinInt64 },
			`request.memory_bytes: must be at least 1MiB, got -5B
request.disk_bytes: must be at least 1MiB, got -8192PiB`},
		{"too much memory and disk", func(s *events.JobSpec) { s.Request.MemoryBytes, s.Request.DiskBytes = math.MaxInt64, MaxDisk+1 },
			`request.memory_bytes: must be at most 64TiB, got 9223372036854775807B
request.disk_bytes: must be at most 1PiB, got 1125899906842625B`},
		{"NaN", func(s *events.JobSpec) { s.Request.CPU, s.Request.LimitSeconds = math.NaN(), math.NaN() },
			`request.cpu: must be a finite number, got NaN
request.limit_seconds: must be a finite number of seconds, got NaN`},
		{"Inf", func(s *events.JobSpec) { s.Request.CPU, s.Request.LimitSeconds = math.Inf(1), math.Inf(-1) },
			`request.cpu: must be a finite number, got +Inf
request.limit_seconds: must be a finite number of seconds, got -Inf`},
		{"out of bounds", func(s *events.JobSpec) {
			s.Request = events.Request{CPU: -1, MemoryBytes: MiB, GPU: -1, DiskBytes: MiB, LimitSeconds: 1e300}
		}, `request.cpu: must be at least 0.01 (a hundredth of a core), got -1
request.gpu: must not be negative, got -1
request.limit_seconds: must be at most 30d, got 1e+300s`},
		{"more out of bounds", func(s *events.JobSpec) {
			s.Request = events.Request{CPU: 1e9, MemoryBytes: MiB, GPU: math.MaxInt, DiskBytes: MiB, LimitSeconds: -0.5}
		}, `request.cpu: must be at most 4096, got 1000000000
request.gpu: must be at most 64, got 9.223372036854776e+18
request.limit_seconds: must be more than 0, got -500ms`},
		{"limit just past the bound", func(s *events.JobSpec) { s.Request.LimitSeconds = MaxLimit.Seconds() + 1 },
			`request.limit_seconds: must be at most 30d, got 720h0m1s`},
		{"data names", func(s *events.JobSpec) {
			s.Data = []events.DataRef{
				{Name: "a/b", FromJob: "j"}, {Name: "..", FromJob: "j"}, {Name: "", FromJob: "j"},
				{Name: "x", FromJob: "j"}, {Name: "x", FromJob: "k"},
			}
		}, `data[0].name: "a/b" must be a plain name (letters, digits, '.', '-', '_')
data[1].name: ".." must be a plain name, not "." or ".."
data[2].name: must not be empty
data[4].name: "x" is already the name of data[3]`},
		{"data resolution", func(s *events.JobSpec) {
			s.Data = []events.DataRef{
				{Name: "no-digest"},
				{Name: "bad-digest", Digest: "md5:abc", Kind: KindFile},
				{Name: "upper-hex", Digest: strings.ToUpper(digest), Kind: KindFile},
				{Name: "no-kind", Digest: digest},
				{Name: "bad-kind", Digest: digest, Kind: "blob"},
				{Name: "both", Digest: digest, Kind: KindFile, FromJob: "j"},
				{Name: "bad-job", FromJob: "../etc"},
				{Name: "negative", Digest: digest, Kind: KindFile, Bytes: -1, Files: -1},
			}
		}, `data[0]: needs a digest and kind (staged data), from_job (an earlier job's output) or checkpoint_of (an earlier job's last checkpoint)
data[1].digest: "md5:abc" is not a digest (expected sha256: and 64 lower-case hex digits)
data[2].digest: "SHA256:0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF" is not a digest (expected sha256: and 64 lower-case hex digits)
data[3].kind: "" is not a kind (expected file or dir)
data[4].kind: "blob" is not a kind (expected file or dir)
data[5]: has both from_job and a digest (give one)
data[6].from_job: "../etc" is not a job id (letters, digits, '-' and '_', at most 64)
data[7].bytes: must not be negative, got -1
data[7].files: must not be negative, got -1`},
		{"too many data entries", func(s *events.JobSpec) { s.Data = manyData }, `data: has 257 entries, more than 256`},
		{"output paths", func(s *events.JobSpec) {
			s.Output = []events.OutputDecl{
				{Path: "../x"}, {Path: "/etc/passwd"}, {Path: "a/../../b"}, {Path: "["}, {Path: ""},
				{Path: "a"}, {Path: "a"}, {Path: "a/./b"}, {Path: "\xff"},
			}
		}, `output[0].path: "../x" must stay under /out (no "..")
output[1].path: "/etc/passwd" must be relative to /out, not absolute
output[2].path: "a/../../b" must stay under /out (no "..")
output[3].path: "[" is not a valid glob (path.Match syntax: *, ?, [a-z], \ to escape)
output[4].path: must not be empty (a path or glob under /out)
output[6].path: "a" is already declared by output[5]
output[7].path: "a/./b" is not clean (write "a/b")
output[8].path: must be valid UTF-8`},
		{"too many outputs", func(s *events.JobSpec) { s.Output = make([]events.OutputDecl, MaxOutputs+1) }, `output: has 257 entries, more than 256`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := staged()
			c.edit(&s)
			err := Validate(s)
			if err == nil {
				t.Fatalf("Validate accepted %+v", s)
			}
			if err.Error() != c.want {
				t.Errorf("Validate:\n%v\nwant:\n%s", err, c.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error is %T, want *Error", err)
			}
			for _, p := range e.Problems {
				if p.File != "" || p.Line != 0 || p.Column != 0 {
					t.Errorf("problem %+v has a position; a spec has none", p)
				}
			}
		})
	}
}

func TestProblemString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    Problem
		want string
	}{
		{Problem{File: "job.yaml", Line: 7, Column: 3, Path: "request.limit", Message: "required"}, "job.yaml:7:3: request.limit: required"},
		{Problem{File: "job.yaml", Line: 7, Path: "request.limit", Message: "required"}, "job.yaml:7: request.limit: required"},
		{Problem{File: "job.json", Path: "data[1].name", Message: "bad"}, "job.json: data[1].name: bad"},
		{Problem{File: "job.yaml", Message: "file is empty"}, "job.yaml: file is empty"},
		{Problem{Path: "request.cpu", Message: "bad"}, "request.cpu: bad"},
		{Problem{Message: "bad"}, "bad"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%+v.String() = %q, want %q", c.p, got, c.want)
		}
	}
}
