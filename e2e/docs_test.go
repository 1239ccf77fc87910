package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// natscliVersion is the nats CLI the schema README's example is run with
// (github.com/nats-io/natscli, the newest on the Go module proxy when the
// test was written).
const natscliVersion = "v0.5.1"

// docDir makes the directory a document's blocks run in, as a reader's
// clone would be: bin/e31 (built by TestMain) and examples/, and a home of
// its own, so that the dev credentials e31 dev notes for the reader are
// found there and nowhere else.
func docDir(t *testing.T) (dir string, env []string) {
	t.Helper()
	dir = t.TempDir()
	t.Cleanup(func() { unmountUnder(t, dir) })
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e31Bin, filepath.Join(dir, "bin", "e31")); err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(examples, filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"USER=reader",
		"LANG=C",
	}
	return dir, env
}

// waitServing waits until an e31 dev in r's directory answers the CLI with
// the dev credentials it wrote for the reader.
func (r *docRun) waitServing(what string) {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cmd := exec.Command(filepath.Join(r.dir, "bin", "e31"), "limits")
		cmd.Dir, cmd.Env = r.dir, r.env
		out, err := cmd.CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: e31 dev does not answer after 2 minutes: %v: %s", what, err, out)
		}
		for _, c := range r.running {
			if c.ProcessState != nil {
				r.t.Fatalf("%s: e31 dev ended: %s", what, c.ProcessState)
			}
		}
		time.Sleep(200 * time.Millisecond) // polling a server that is starting, with a deadline
	}
}

// TestReadmeBlocksRun runs every block of commands of README.md as written,
// against the e31 dev its own block starts (in the sandbox: the test runs
// as root), and checks that the job it submits succeeded and its output
// was written.
func TestReadmeBlocksRun(t *testing.T) {
	blocks := shellBlocks(t, "../README.md")
	dir, env := docDir(t)
	ownNetwork(t)
	r := &docRun{t: t, dir: dir, env: env}
	r.runAll(blocks, func(b block) { r.waitServing(b.String()) })
	for _, f := range []string{"counts.txt", "top-words.txt"} {
		b, err := os.ReadFile(filepath.Join(dir, "out", f))
		if err != nil || len(b) == 0 {
			t.Errorf("README's job returned no %s: %v", f, err)
		}
	}
}

// TestGuidesBlocksRun runs every block of commands of each guide in docs/,
// as written: each guide in a directory and network of its own, against
// the e31 dev its own background block starts (in the sandbox: the test
// runs as root), with the nats CLI on PATH (operating.md backs the streams
// up with it). A guide added to docs/ is run without a line here.
func TestGuidesBlocksRun(t *testing.T) {
	guides, err := filepath.Glob("../docs/*.md")
	if err != nil || len(guides) == 0 {
		t.Fatalf("no guides in ../docs: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace of its own, and the sandbox of the e31 dev the guides start")
	}
	nats := buildNatscli(t)
	for _, guide := range guides {
		t.Run(filepath.Base(guide), func(t *testing.T) {
			blocks := shellBlocks(t, guide)
			if len(blocks) == 0 {
				t.Skipf("%s has no block of commands", guide)
			}
			dir, env := docDir(t)
			env[0] = "PATH=" + filepath.Dir(nats) + ":" + os.Getenv("PATH")
			ownNetwork(t)
			r := &docRun{t: t, dir: dir, env: env}
			r.runAll(blocks, func(b block) { r.waitServing(b.String()) })
		})
	}
}

// TestEveryAlertSaysWhatToDo checks that every alert of
// deploy/prometheus/rules.yml has a row in docs/operating.md's table of
// what to do when it fires, and that the table names no alert the rules do
// not have.
func TestEveryAlertSaysWhatToDo(t *testing.T) {
	rules, err := os.ReadFile("../deploy/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert:\s*(\S+)`).FindAllStringSubmatch(string(rules), -1) {
		alerts = append(alerts, m[1])
	}
	if len(alerts) == 0 {
		t.Fatal("deploy/prometheus/rules.yml: no alerts found")
	}
	guide, err := os.ReadFile("../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(guide), "## When an alert fires")
	if !ok {
		t.Fatal(`docs/operating.md has no section "## When an alert fires"`)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(E31\\w+)`").FindAllStringSubmatch(table, -1) {
		rows[m[1]] = true
	}
	for _, a := range alerts {
		if !rows[a] {
			t.Errorf("docs/operating.md does not say what to do when %s fires", a)
		}
		delete(rows, a)
	}
	for a := range rows {
		t.Errorf("docs/operating.md has a row for %s, which deploy/prometheus/rules.yml does not define", a)
	}
}

// TestSchemaReadmeBlocksRun runs pkg/events/schema/README.md's blocks, the
// natscli example, as written with the real nats CLI against an e31 dev
// that knows the submitter billing, and checks that e31 took the request:
// the job it names succeeds and returns its output.
func TestSchemaReadmeBlocksRun(t *testing.T) {
	blocks := shellBlocks(t, "../pkg/events/schema/README.md")
	nats := buildNatscli(t)
	dir, env := docDir(t)
	env[0] = "PATH=" + filepath.Dir(nats) + ":" + os.Getenv("PATH")
	ownNetwork(t)
	r := &docRun{t: t, dir: dir, env: env}
	r.start(block{Path: "(test)", Line: 1, Shell: "sh", Commands: "exec bin/e31 dev --users billing\n"}, filepath.Join(dir, "dev.log"))
	r.waitServing("e31 dev --users billing")
	if err := copyFile(filepath.Join(dir, ".e31", "creds", "billing.creds"), filepath.Join(dir, "billing.creds"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.runAll(blocks, func(b block) { t.Fatalf("%s: nothing in this document is meant to run in the background", b) })
	const job = "report-2025-03-14" // the id the example proposes
	r.run(block{Path: "(test)", Line: 1, Shell: "sh",
		Commands: "bin/e31 wait " + job + " --creds billing.creds --timeout 2m\nbin/e31 output " + job + " --creds billing.creds -o out\n"}, 3*time.Minute)
	if b, err := os.ReadFile(filepath.Join(dir, "out", "report.txt")); err != nil || len(b) == 0 {
		t.Errorf("the example's job returned no report.txt: %v", err)
	}
}

// buildNatscli builds the nats CLI (once per test binary run: Go's build
// cache keeps it) from the module proxy, before the test leaves the
// machine's network.
func buildNatscli(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(buildDir), "natscli")
	if _, err := os.Stat(filepath.Join(bin, "nats")); err == nil {
		return filepath.Join(bin, "nats")
	}
	start := time.Now()
	cmd := exec.Command("go", "install", "github.com/nats-io/natscli/nats@"+natscliVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOWORK=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the nats CLI %s: %v\n%s", natscliVersion, err, out)
	}
	t.Logf("built the nats CLI %s in %s", natscliVersion, time.Since(start).Round(time.Millisecond))
	return filepath.Join(bin, "nats")
}

// recorder is a testing.TB that keeps the errors reported to it.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, strings.TrimSpace(fmt.Sprintf(format, args...)))
}
func (r *recorder) Helper() {}

// TestShellBlocksHonoursMarkers checks the extractor on a small document:
// blocks with their lines and markers, and the mistakes it must refuse.
func TestShellBlocksHonoursMarkers(t *testing.T) {
	doc := strings.Join([]string{
		"# doc",                                  // 1
		"<!-- not run: too long -->",             // 2
		"```sh",                                  // 3
		"make demo",                              // 4
		"```",                                    // 5
		"<!-- in the background: the server -->", // 6
		"",                                       // 7
		"```bash",                                // 8
		"bin/e31 dev",                            // 9
		"```",                                    // 10
		"```console",                             // 11
		"$ echo a \\",                            // 12
		"  b",                                    // 13
		"a b",                                    // 14
		"```",                                    // 15
		"```yaml",                                // 16
		"a: 1",                                   // 17
		"```",                                    // 18
		"````sh",                                 // 19
		"echo '```'",                             // 20
		"````",                                   // 21
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{TB: t}
	got := shellBlocks(rec, path)
	if len(rec.errs) != 0 {
		t.Fatalf("errors on a good document: %q", rec.errs)
	}
	want := []block{
		{Path: path, Line: 4, Shell: "sh", Commands: "make demo\n", NotRun: "too long"},
		{Path: path, Line: 9, Shell: "bash", Commands: "bin/e31 dev\n", Background: true},
		{Path: path, Line: 12, Shell: "sh", Commands: "echo a \\\n  b\n"},
		{Path: path, Line: 20, Shell: "sh", Commands: "echo '```'\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d blocks, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("block %d: got %+v, want %+v", i, got[i], want[i])
		}
	}

	for _, bad := range []struct{ doc, want string }{
		{"```\nls\n```\n", "without a language"},
		{"<!-- not run: -->\n```sh\nls\n```\n", "needs a reason"},
		{"<!-- not run: x -->\ntext\n```sh\nls\n```\n", "not followed by a block"},
		{"<!-- not run: x -->\n```yaml\na: 1\n```\n", "not run anyway"},
		{"```sh\nls\n", "never closed"},
	} {
		if err := os.WriteFile(path, []byte(bad.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{TB: t}
		shellBlocks(rec, path)
		if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], bad.want) {
			t.Errorf("%q: errors %q, want one saying %q", bad.doc, rec.errs, bad.want)
		}
	}
}
