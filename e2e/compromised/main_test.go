package compromised_test

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

// The identities: the tenant, the operator and the auditor `e31 dev`
// writes credentials for, its one node, and the rogue node the operator
// adds.
const (
	honest   = "honest"
	operator = "operator"
	auditor  = "auditor"
	node1    = "node-1"
	rogue    = "rogue"
)

// bait is the image the bait job names: the operator allows it, and only
// the rogue says it runs jobs that name one.
const bait = "e31-bait"

// The e31 under test: where it listens, its CLI, the folder of the
// credentials it wrote, and its log.
var e31URL, e31Bin, credsDir, devLog string

// TestMain builds e31, starts `e31 dev` as a separate process with one
// node, and, as its operator, issues the rogue node's credentials and
// allows the bait's image.
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "e31-compromised-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getenv("E31_E2E_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "compromised: keeping", dir)
	}
	e31Bin = filepath.Join(dir, "e31")
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	build := exec.Command("go", "build", "-o", e31Bin, "./cmd/e31")
	build.Dir = root
	build.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"))
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "compromised: build e31: %v\n%s", err, out)
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
	// The attacks are on the bus, not on the sandbox: the process executor
	// needs no root.
	cmd := exec.Command(e31Bin, "dev", "--dir", state, "--listen", addr, "--users", honest,
		"--nodes", "1", "--node-cpu", "2", "--node-memory", "2GiB", "--executor", "process", "--sync", "interval", "--log-level", "warn")
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
		fmt.Fprintln(os.Stderr, "compromised: start e31 dev:", err)
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
			fmt.Fprintf(os.Stderr, "compromised: e31 dev exited before it was ready\n%s", tail(devLog, 100))
			return 1
		}
	case <-time.After(time.Minute):
		fmt.Fprintln(os.Stderr, "compromised: e31 dev was not ready within a minute")
		return 1
	}
	// The operator, offline, with the keys `e31 dev` keeps in DIR/keys,
	// makes a node's credentials, signing key and card as for any machine
	// joining the pool: `e31 dev`'s RENT holds nothing on a node without
	// a card.
	mk := exec.Command(e31Bin, "creds", "node", "--dir", filepath.Join(state, "keys"), "--name", rogue,
		"--cpu", "0.1", "--memory", "32MiB", "--disk", "1GiB", "--isolation", "container", "-o", rogueDir())
	if out, err := mk.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "compromised: e31 creds node: %v\n%s", err, out)
		return 1
	}
	if err := os.Link(filepath.Join(rogueDir(), "e31.creds"), creds(rogue)); err != nil {
		fmt.Fprintf(os.Stderr, "compromised: the rogue's credentials: %v\n", err)
		return 1
	}
	allow := exec.Command(e31Bin, "setup", "--allow-image", bait, "--nats", e31URL, "--creds", creds(operator))
	if out, err := allow.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "compromised: e31 setup --allow-image: %v\n%s", err, out)
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

// creds is the credentials file of identity.
func creds(identity string) string { return filepath.Join(credsDir, identity+".creds") }

// connect opens a plain NATS connection as identity, with its credentials
// and the one inbox prefix its permissions allow (read from its user JWT).
func connect(t testing.TB, identity string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	b, err := os.ReadFile(creds(identity))
	if err != nil {
		t.Fatalf("credentials of %s: %v", identity, err)
	}
	opts = append([]nats.Option{nats.UserCredentials(creds(identity)), nats.Name("compromised-" + identity)}, opts...)
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
// "_INBOX".
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
}

func (r cliResult) String() string {
	return fmt.Sprintf("(%v)\nstdout: %s\nstderr: %s", r.err, clip(r.stdout, 800), clip(r.stderr, 800))
}

// e31 runs the e31 CLI as identity, bounded by timeout.
func e31(t testing.TB, identity string, timeout time.Duration, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e31Bin, append(args, "--nats", e31URL, "--creds", creds(identity))...)
	cmd.Env = append(os.Environ(), "E31_NATS=", "E31_CREDS=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("no answer within %s (%v)", timeout, err)
	}
	return cliResult{stdout: out.String(), stderr: errOut.String(), err: err}
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("… (%d bytes)", len(s))
}
