package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/nats-io/nats.go"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/e31net/e31/pkg/connect"
)

// e31Bin is the static e31 binary the tests run on the host and put in images.
var e31Bin string

// buildDir holds the image build context.
var buildDir string

func TestMain(m *testing.M) {
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	// With a local engine, published ports are on this host. testcontainers
	// guesses otherwise when it believes it runs inside a container itself
	// (it then reports the default gateway), which is wrong on these machines.
	if os.Getenv("DOCKER_HOST") == "" && os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	}
	dir, err := os.MkdirTemp("", "e31-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := prepare(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: prepare:", err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// prepare builds the e31 binary and an image build context: a root file
// system with e31 and busybox (for the shells jobs run), FROM scratch.
func prepare(dir string) error {
	buildDir = filepath.Join(dir, "image")
	root := filepath.Join(buildDir, "rootfs")
	for _, d := range []string{"usr/bin", "bin", "tmp", "state"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	e31Bin = filepath.Join(root, "usr/bin/e31")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", e31Bin, "../cmd/e31")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox is needed for the shells jobs run in the image (apt-get install busybox-static): %w", err)
	}
	if err := copyFile(busybox, filepath.Join(root, "bin/busybox"), 0o755); err != nil {
		return err
	}
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			return err
		}
	}
	dockerfile := "FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/bin:/bin\nENTRYPOINT [\"/usr/bin/e31\"]\n"
	return os.WriteFile(filepath.Join(buildDir, "Dockerfile"), []byte(dockerfile), 0o644)
}

func copyFile(from, to string, mode os.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, mode)
}

// dev is `e31 dev` running in a container, as the host sees it.
type dev struct {
	c   *testcontainers.DockerContainer
	url string
	// state is the container's --dir, bind-mounted from the host: its
	// creds/ holds the credentials e31 dev made (e2e.creds, for the
	// submitter "e2e", and auditor.creds).
	state string
}

// creds is the host path of the credentials e31 dev made for who.
func (d *dev) creds(who string) string { return filepath.Join(d.state, "creds", who+".creds") }

// as are the options a NATS client on the host connects to d with as who:
// its credentials and its own inbox prefix.
func (d *dev) as(t *testing.T, who string) []nats.Option {
	t.Helper()
	opts, err := connect.SecurityOptions(connect.Config{Creds: d.creds(who)})
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// e31 runs the host's e31 against d as who.
func (d *dev) e31(t *testing.T, who string, args ...string) (string, string, int) {
	t.Helper()
	return e31(t, d.url, append(args, "--creds", d.creds(who))...)
}

// devContainer runs `e31 dev` in a container, with authentication on and a
// submitter "e2e". The container is not allowed what the sandbox needs
// (cgroups, namespaces), and a node that cannot isolate jobs refuses to
// start: the jobs run as plain processes, which the container confines,
// by the operator's explicit choice.
func devContainer(t *testing.T, args ...string) *dev {
	t.Helper()
	ctx := context.Background()
	state := t.TempDir()
	cmd := append([]string{"dev", "--dir", "/state", "--listen", "0.0.0.0:4222", "--grace", "1s", "--users", "e2e", "--executor", "process"}, args...)
	c, err := testcontainers.Run(ctx, "",
		testcontainers.WithDockerfile(testcontainers.FromDockerfile{Context: buildDir, Repo: "e31-e2e", Tag: "latest", KeepImage: true}),
		testcontainers.WithCmd(cmd...),
		testcontainers.WithExposedPorts("4222/tcp"),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.Binds = append(hc.Binds, state+":/state")
		}),
		testcontainers.WithWaitStrategy(wait.ForLog("NATS JetStream listening").WithStartupTimeout(60*time.Second)),
	)
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start e31 dev in a container: %v", err)
	}
	return &dev{c: c, url: natsURL(t, c), state: state}
}

func natsURL(t *testing.T, c *testcontainers.DockerContainer) string {
	t.Helper()
	ctx := context.Background()
	host, err := c.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	port, err := c.MappedPort(ctx, "4222/tcp")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("nats://%s:%s", host, port.Port())
}

// e31 runs the host's e31 against url and returns stdout, stderr and the exit code.
func e31(t testing.TB, url string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e31Bin, append(args, "--nats", url, "--log-level", "warn")...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("e31 %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}
