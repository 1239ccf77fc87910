package hostile_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// The identities `e31 dev` makes credentials for: the two tenants, and
// the operator and auditor it always writes.
const (
	mallory  = "mallory"
	honest   = "honest"
	operator = "operator"
	auditor  = "auditor"
)

// The e31 under test: where it listens, its CLI, and the folder of the
// credentials it wrote.
var e31URL, e31Bin, credsDir string

// devLog is the file e31 dev writes its log to; shown when a test fails.
var devLog string

// executor is how the nodes of the e31 under test run jobs. The attacks
// are on the bus, not on the sandbox, so the process executor (no root
// needed) is the default; E31_HOSTILE_EXECUTOR changes it.
func executor() string {
	if e := os.Getenv("E31_HOSTILE_EXECUTOR"); e != "" {
		return e
	}
	return "process"
}

// TestMain builds the e31 binary and starts `e31 dev` as a separate
// process: the system under test, known to this package only by its
// address and the credentials it wrote. Two nodes and two scheduler
// instances, so that an attack that takes one of them down (a lease
// overwritten) shows in what it did to the honest tenant's jobs rather
// than as every later test waiting for a dead pool.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "e31-hostile-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getenv("E31_E2E_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "hostile: keeping", dir)
	}
	e31Bin = filepath.Join(dir, "e31")
	// Built as `make build` builds it, in the repository's workspace: this
	// module runs with GOWORK=off, which must not reach the build of e31.
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	build := exec.Command("go", "build", "-o", e31Bin, "./cmd/e31")
	build.Dir = root
	build.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"))
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "hostile: build e31: %v\n%s", err, out)
		return 1
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	addr := l.Addr().String()
	l.Close()
	e31URL = "nats://" + addr
	state := filepath.Join(dir, "state")
	credsDir = filepath.Join(state, "creds")
	cmd := exec.Command(e31Bin, "dev", "--dir", state, "--listen", addr, "--users", mallory+","+honest,
		"--nodes", "2", "--node-cpu", "2", "--node-memory", "2GiB", "--rent-instances", "2",
		"--executor", executor(), "--sync", "interval", "--log-level", "warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	devLog = filepath.Join(dir, "e31.log")
	logs, err := os.Create(devLog)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer logs.Close()
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "hostile: start e31 dev:", err)
		return 1
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	ready := make(chan bool)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "NATS JetStream listening") {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			b, _ := os.ReadFile(devLog)
			fmt.Fprintf(os.Stderr, "hostile: e31 dev exited before it was ready\n%s", b)
			return 1
		}
	case <-time.After(time.Minute):
		fmt.Fprintln(os.Stderr, "hostile: e31 dev was not ready within a minute")
		return 1
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- the end of e31 dev's log (%s):\n%s", devLog, tail(devLog, 200))
	}
	return code
}

// tail is the last n lines of a file.
func tail(file string, n int) string {
	b, _ := os.ReadFile(file)
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// creds is the credentials file e31 dev wrote for identity.
func creds(identity string) string { return filepath.Join(credsDir, identity+".creds") }

// connect opens a plain NATS connection as identity, with the credentials
// e31 made for it. Replies come to the one inbox prefix its permissions
// allow, read from its user JWT (for a submitter,
// _INBOX_submitter_<name>, as pkg/events/schema/README.md says).
func connect(t testing.TB, identity string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	b, err := os.ReadFile(creds(identity))
	if err != nil {
		t.Fatalf("credentials of %s: %v", identity, err)
	}
	opts = append([]nats.Option{nats.UserCredentials(creds(identity)), nats.Name("hostile-" + identity)}, opts...)
	if prefix := inboxPrefix(t, b); prefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(prefix))
	}
	nc, err := nats.Connect(e31URL, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", identity, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// inboxPrefix finds, in a NATS credentials file, the inbox its user may
// subscribe to: the allowed subscription "<prefix>.>" that starts with
// "_INBOX". The user JWT is base64url JSON (nats.permissions.sub.allow).
func inboxPrefix(t testing.TB, creds []byte) string {
	t.Helper()
	m := regexp.MustCompile(`-{3,}BEGIN NATS USER JWT-{3,}\s*(\S+)\s*-{3,}END NATS USER JWT-{3,}`).FindSubmatch(creds)
	if m == nil {
		t.Fatal("the credentials file has no user JWT")
	}
	parts := strings.Split(string(m[1]), ".")
	if len(parts) != 3 {
		t.Fatal("the user JWT is not header.claims.signature")
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("the user JWT's claims: %v", err)
	}
	var claims struct {
		NATS struct {
			Sub struct {
				Allow []string `json:"allow"`
			} `json:"sub"`
		} `json:"nats"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil {
		t.Fatalf("the user JWT's claims: %v", err)
	}
	for _, s := range claims.NATS.Sub.Allow {
		if strings.HasPrefix(s, "_INBOX") && strings.HasSuffix(s, ".>") {
			return strings.TrimSuffix(s, ".>")
		}
	}
	return ""
}

// cliResult is what one run of the e31 CLI did.
type cliResult struct {
	stdout, stderr string
	err            error
	took           time.Duration
}

// String is the run as a person reads it in a failure.
func (r cliResult) String() string {
	s := fmt.Sprintf("(%v, %s)", r.err, r.took.Round(time.Millisecond))
	if out := strings.TrimSpace(r.stdout); out != "" {
		s += "\nstdout: " + clip(out, 600)
	}
	if errOut := strings.TrimSpace(r.stderr); errOut != "" {
		s += "\nstderr: " + clip(errOut, 600)
	}
	return s
}

// e31 runs the e31 CLI as identity, as a person would, bounded by timeout.
func e31(t testing.TB, identity string, timeout time.Duration, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e31Bin, append(args, "--nats", e31URL, "--creds", creds(identity))...)
	cmd.Env = append(os.Environ(), "E31_NATS=", "E31_CREDS=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("no answer within %s (%v)", timeout, err)
	}
	return cliResult{stdout: out.String(), stderr: errOut.String(), err: err, took: time.Since(start)}
}

// clip shortens s for a message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("… (%d bytes)", len(s))
}
