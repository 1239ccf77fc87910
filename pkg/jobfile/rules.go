package jobfile

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/e31net/e31/pkg/events"
)

// The rules in this file are shared by Parse (which reports them at a
// position in the file) and Validate (which reports them by field path), so
// that a file the CLI accepts is a spec SUBMIT accepts. Each returns "" when
// the value is fine, else what is wrong, worded for the person who wrote it.

// Defaults for what a job file's request leaves out.
const (
	DefaultCPU    = 1.0
	DefaultMemory = 512 * MiB
	DefaultGPU    = 0
	DefaultDisk   = 1 * GiB
)

// Bounds on a job file and a spec. The request bounds are sanity limits that
// catch typos ("512TB") and hostile specs, not the capacity of any pool: a
// job that fits no node waits, it is not refused.
const (
	// MaxFileBytes bounds a job file. Real ones are a few hundred bytes.
	MaxFileBytes = 1 << 20
	// MaxDepth bounds nesting in a job file. The format needs 3 levels; the
	// bound exists because the YAML parser's cost grows with the square of
	// the nesting depth.
	MaxDepth = 32
	// MaxTokens bounds the YAML tokens of a job file, for the same reason:
	// the parser's cost grows faster than linearly with the entries of a
	// block mapping. A typical job file has under 200.
	MaxTokens = 20000

	// MaxNameLen bounds the job's label, in characters.
	MaxNameLen = 128
	// MaxArgBytes is the kernel's limit on one argument or environment
	// string (MAX_ARG_STRLEN, 128 KiB with its terminating NUL).
	MaxArgBytes = 128*KiB - 1
	// MaxExecBytes bounds the command and environment together, well inside
	// what execve accepts, so that a valid spec always starts.
	MaxExecBytes = 256 * KiB
	// MaxImageLen bounds an image reference.
	MaxImageLen = 512
	// MaxData bounds the staged inputs of a job.
	MaxData = 256
	// MaxDataNameLen bounds a staged input's name (one path element).
	MaxDataNameLen = 128
	// MaxOutputs bounds the declared outputs of a job.
	MaxOutputs = 256
	// MaxOutputPathLen bounds a declared output path or glob.
	MaxOutputPathLen = 1024

	// MinCPU is the smallest CPU share a node can enforce: cgroup v2's
	// cpu.max quota is at least 1ms per default 100ms period.
	MinCPU = 0.01
	// MaxCPU bounds request.cpu, in cores.
	MaxCPU = 4096
	// MaxGPU bounds request.gpu.
	MaxGPU = 64
	// MinMemory is the least memory a process can start in.
	MinMemory = 1 * MiB
	// MaxMemory bounds request.memory.
	MaxMemory = 64 * TiB
	// MinDisk is the least writable space a job gets.
	MinDisk = 1 * MiB
	// MaxDisk bounds request.disk.
	MaxDisk = 1 * PiB
	// MaxLimit bounds request.limit: longer work should checkpoint and
	// continue as a new job.
	MaxLimit = 30 * Day
)

// Expectations, quoted in messages where a value is missing or of the wrong
// type.
const (
	wantCommand  = `a list of strings, e.g. ["/bin/sh", "-c", "echo hi"], or one string run by /bin/sh -c`
	wantLimit    = "a duration such as 10m"
	wantSize     = "a size such as 512MiB or 2GB"
	wantCPU      = "a number of cores such as 1 or 0.5"
	wantGPU      = "a whole number of GPUs such as 0 or 1"
	wantDataName = "a plain name such as clips, for /data/clips"
	wantOutput   = "a path or glob under /out"
)

var (
	envNamePattern   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	plainNamePattern = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	digestPattern    = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	// imagePattern is loose on purpose (the executor and registry judge the
	// reference) but never lets a reference start with '-', where a
	// container CLI would read it as a flag.
	imagePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$`)
)

// reservedEnvPrefix is the namespace of the variables the sandbox sets
// ($E31_DATA, $E31_OUTPUT, $E31_JOB_ID, …); a job must not be able to point
// them elsewhere.
const reservedEnvPrefix = "E31_"

// quote writes a value into a message, cut short so that one huge value
// does not bury the others.
func quote(s string) string {
	const max = 100
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "…"
	}
	return strconv.Quote(s)
}

// checkText is what every string in a spec must be: valid UTF-8, because
// events travel as JSON, which would replace invalid bytes and so change the
// spec between the CLI and SUBMIT.
func checkText(s string) string {
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	return ""
}

func hasControl(s string) bool { return strings.ContainsFunc(s, unicode.IsControl) }

func checkLabel(s string) string {
	if why := checkText(s); why != "" {
		return why
	}
	if utf8.RuneCountInString(s) > MaxNameLen {
		return fmt.Sprintf("is longer than %d characters", MaxNameLen)
	}
	if hasControl(s) {
		return "must not contain control characters"
	}
	return ""
}

// checkExecString is what execve needs of an argument or "KEY=value".
func checkExecString(s string) string {
	if why := checkText(s); why != "" {
		return why
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "must not contain a NUL byte"
	}
	if int64(len(s)) > MaxArgBytes {
		return "is longer than 128KiB, the kernel's limit for one string"
	}
	return ""
}

func checkArg(i int, s string) string {
	if i == 0 && s == "" {
		return "must not be empty (it is the program to run)"
	}
	return checkExecString(s)
}

func checkEnvName(k string) string {
	if why := checkText(k); why != "" {
		return why
	}
	if !envNamePattern.MatchString(k) {
		return fmt.Sprintf("%s is not a variable name (letters, digits and '_', not starting with a digit)", quote(k))
	}
	if strings.HasPrefix(k, reservedEnvPrefix) {
		return fmt.Sprintf("%s is reserved (e31 sets the %s variables)", quote(k), reservedEnvPrefix)
	}
	return ""
}

func checkEnvValue(k, v string) string { return checkExecString(k + "=" + v) }

// execBytes is what the command and environment take in execve's budget:
// every string with its terminating NUL.
func execBytes(cmd []string, env map[string]string) int {
	n := 0
	for _, a := range cmd {
		n += len(a) + 1
	}
	for k, v := range env {
		n += len(k) + 1 + len(v) + 1
	}
	return n
}

func checkExecBytes(cmd []string, env map[string]string) string {
	if n := execBytes(cmd, env); int64(n) > MaxExecBytes {
		return fmt.Sprintf("command and env together take %d bytes, more than the %s a job may pass to its program",
			n, formatSize(MaxExecBytes))
	}
	return ""
}

func checkImage(s string) string {
	if why := checkText(s); why != "" {
		return why
	}
	if len(s) > MaxImageLen {
		return fmt.Sprintf("is longer than %d bytes", MaxImageLen)
	}
	if !imagePattern.MatchString(s) {
		return fmt.Sprintf("%s is not an image reference (e.g. alpine:3.20 or ghcr.io/org/tool@sha256:…)", quote(s))
	}
	return ""
}

func checkDataName(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > MaxDataNameLen:
		return fmt.Sprintf("is longer than %d characters", MaxDataNameLen)
	case !plainNamePattern.MatchString(s):
		return fmt.Sprintf("%s must be a plain name (letters, digits, '.', '-', '_')", quote(s))
	case s == "." || s == "..":
		return fmt.Sprintf(`%s must be a plain name, not "." or ".."`, quote(s))
	}
	return ""
}

func checkFromJob(s string) string {
	if !events.ValidID(s) {
		return fmt.Sprintf("%s is not a job id (letters, digits, '-' and '_', at most 64)", quote(s))
	}
	return ""
}

func checkDigest(s string) string {
	if !digestPattern.MatchString(s) {
		return fmt.Sprintf("%s is not a digest (expected sha256: and 64 lower-case hex digits)", quote(s))
	}
	return ""
}

// Data kinds, as the CLI records them after upload.
const (
	KindFile = "file"
	KindDir  = "dir"
)

func checkKind(s string) string {
	if s != KindFile && s != KindDir {
		return fmt.Sprintf("%s is not a kind (expected %s or %s)", quote(s), KindFile, KindDir)
	}
	return ""
}

// checkOutputPath keeps every declared output inside /out: relative, clean,
// no ".." segment, and (for globs) a pattern path.Match can use.
func checkOutputPath(p string) string {
	if why := checkText(p); why != "" {
		return why
	}
	switch {
	case p == "":
		return "must not be empty (" + wantOutput + ")"
	case len(p) > MaxOutputPathLen:
		return fmt.Sprintf("is longer than %d bytes", MaxOutputPathLen)
	case hasControl(p):
		return fmt.Sprintf("%s must not contain control characters", quote(p))
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Sprintf("%s must stay under /out (no \"..\")", quote(p))
	case strings.HasPrefix(p, "/"):
		if rest, ok := strings.CutPrefix(p, "/out/"); ok && rest != "" && path.Clean(rest) == rest {
			return fmt.Sprintf("%s must be relative to /out (write %s)", quote(p), quote(rest))
		}
		return fmt.Sprintf("%s must be relative to /out, not absolute", quote(p))
	case p == ".":
		return fmt.Sprintf("%s must name something under /out", quote(p))
	case path.Clean(p) != p:
		return fmt.Sprintf("%s is not clean (write %s)", quote(p), quote(path.Clean(p)))
	}
	// path.Match checks the whole pattern even when the name does not match.
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Sprintf("%s is not a valid glob (path.Match syntax: *, ?, [a-z], \\ to escape)", quote(p))
	}
	return ""
}

// formatFloat writes a number as people do, without an exponent unless it
// is enormous.
func formatFloat(f float64) string {
	if math.Abs(f) < 1e15 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func checkCPU(c float64) string {
	switch {
	case math.IsNaN(c) || math.IsInf(c, 0):
		return "must be a finite number, got " + formatFloat(c)
	case c < MinCPU:
		return fmt.Sprintf("must be at least %v (a hundredth of a core), got %s", MinCPU, formatFloat(c))
	case c > MaxCPU:
		return fmt.Sprintf("must be at most %d, got %s", MaxCPU, formatFloat(c))
	}
	return ""
}

// checkGPU takes a float so that the file's reader can pass whatever number
// it found; Validate passes an int.
func checkGPU(n float64) string {
	switch {
	case n != math.Trunc(n):
		return "must be a whole number, got " + formatFloat(n)
	case n < 0:
		return "must not be negative, got " + formatFloat(n)
	case n > MaxGPU:
		return fmt.Sprintf("must be at most %d, got %s", MaxGPU, formatFloat(n))
	}
	return ""
}

func checkBytes(n, lo, hi int64) string {
	switch {
	case n < lo:
		return fmt.Sprintf("must be at least %s, got %s", formatSize(lo), formatSize(n))
	case n > hi:
		return fmt.Sprintf("must be at most %s, got %s", formatSize(hi), formatSize(n))
	}
	return ""
}

func checkMemory(n int64) string { return checkBytes(n, MinMemory, MaxMemory) }
func checkDisk(n int64) string   { return checkBytes(n, MinDisk, MaxDisk) }

// checkLimit takes seconds because that is what a spec carries.
func checkLimit(sec float64) string {
	got := formatFloat(sec) + "s"
	if math.Abs(sec) < 1e9 { // well inside what a time.Duration holds
		got = formatDuration(time.Duration(sec * float64(time.Second)))
	}
	switch {
	case math.IsNaN(sec) || math.IsInf(sec, 0):
		return "must be a finite number of seconds, got " + formatFloat(sec)
	case sec <= 0:
		return "must be more than 0, got " + got
	case sec > MaxLimit.Seconds():
		return fmt.Sprintf("must be at most %s, got %s", formatDuration(MaxLimit), got)
	}
	return ""
}

// Bounds of the scheduling fields.
const (
	// MaxAfter bounds the jobs one job may wait for.
	MaxAfter = 256
	// MaxSweep bounds the jobs one sweep makes.
	MaxSweep = 100000
	// MaxSweepValue bounds one sweep value, in bytes.
	MaxSweepValue = 4096
)

func checkPriority(n float64) string {
	if n != float64(int(n)) || n < events.MinPriority || n > events.MaxPriority {
		return fmt.Sprintf("must be %s, got %v", wantPriority, n)
	}
	return ""
}

func checkSweepValue(s string) string {
	switch {
	case len(s) > MaxSweepValue:
		return fmt.Sprintf("is %d bytes, more than %d", len(s), MaxSweepValue)
	case strings.IndexByte(s, 0) >= 0:
		return "must not contain a NUL byte"
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	}
	return ""
}
