package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The process harness: e31's services as separate processes of the e31
// binary (`e31 serve ...`) against a nats-server child process, each of
// which a test can kill with SIGKILL and start again, as a machine would
// lose them.

var (
	natsServerOnce sync.Once
	natsServerBin  string
	natsServerErr  error
)

// natsServer builds nats-server from the module pkg/go.mod requires (the
// version the images carry) once per test binary.
func natsServer(t testing.TB) string {
	t.Helper()
	natsServerOnce.Do(func() {
		natsServerBin = filepath.Join(filepath.Dir(buildDir), "nats-server")
		cmd := exec.Command("go", "build", "-o", natsServerBin, "github.com/nats-io/nats-server/v2")
		cmd.Dir = "../pkg"
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			natsServerErr = fmt.Errorf("build nats-server: %v\n%s", err, out)
		}
	})
	if natsServerErr != nil {
		t.Fatal(natsServerErr)
	}
	return natsServerBin
}

// proc is one child process that can be killed and started again with
// the same arguments; its output goes to a log file, shown if the test fails.
type proc struct {
	name string
	args []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	runs int
}

// startProc starts bin with args and stops it when the test ends.
func startProc(t testing.TB, dir, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, args: append([]string{bin}, args...), log: filepath.Join(dir, name+".log")}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			p.dumpLog(t, 40)
		}
	})
	return p
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.runs++
	fmt.Fprintf(f, "=== start %d of %s\n", p.runs, p.name)
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so that a kill reaches nothing else, and a
	// death signal, so that a process the test forgets cannot outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stop asks the process to stop (SIGTERM), then kills it after a while.
func (p *proc) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// pid is the current process id, for reading its memory.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// exited reports whether the current process has ended by itself.
func (p *proc) exited() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func (p *proc) dumpLog(t testing.TB, lines int) {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	t.Logf("--- last %d lines of %s:\n%s", min(lines, len(all)), p.name, strings.Join(all[max(0, len(all)-lines):], "\n"))
}

// logHas counts the lines of the process's log that contain s.
func (p *proc) logHas(s string) int {
	b, _ := os.ReadFile(p.log)
	return bytes.Count(b, []byte(s))
}

// rssKiB is the resident set of a process, from the kernel.
func rssKiB(pid int) int { return statusKiB(pid, "VmRSS:") }

// statusKiB is one of the kilobyte figures of /proc/<pid>/status (field
// with its colon); 0 once the process is gone.
func statusKiB(pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return n
		}
	}
	return 0
}

// freePort finds a TCP port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// system is e31 as separate processes on this machine.
type system struct {
	t    testing.TB
	dir  string
	url  string
	nats *proc
	// services by class ("submit", "rent", …, "run"), several instances each.
	services map[string][]*proc
	ranFile  string
}

// systemOptions says how many instances of each service to start.
type systemOptions struct {
	instances map[string]int // by service; run is the number of nodes
	nodeCPU   float64
	leaseTTL  time.Duration
	// setup are more arguments for `e31 setup` (--allow-image …).
	setup []string
}

// startSystem starts nats-server, creates the streams, then every service.
func startSystem(t testing.TB, o systemOptions) *system {
	t.Helper()
	dir := t.TempDir()
	if os.Getenv("E31_E2E_KEEP") != "" {
		// For a post-mortem: every process's whole log, and the NATS store.
		var err error
		if dir, err = os.MkdirTemp("", "e31-"+t.Name()+"-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("E31_E2E_KEEP: logs and store kept in %s", dir)
	}
	port := freePort(t)
	s := &system{t: t, dir: dir, url: fmt.Sprintf("nats://127.0.0.1:%d", port), services: map[string][]*proc{},
		ranFile: filepath.Join(dir, "ran.log")}
	s.nats = startProc(t, dir, "nats-server", natsServer(t),
		"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "nats"), "-n", "e2e")
	s.waitNATS()
	if out, errOut, code := e31(t, s.url, append([]string{"setup", "--lease-ttl", o.leaseTTL.String()}, o.setup...)...); code != 0 {
		t.Fatalf("e31 setup: exit %d\n%s%s", code, out, errOut)
	}
	for _, class := range []string{"ledger", "submit", "rent", "output", "release", "run"} {
		for i := 1; i <= o.instances[class]; i++ {
			s.add(class, i, o.nodeCPU)
		}
	}
	return s
}

// add starts instance i of a service.
func (s *system) add(class string, i int, nodeCPU float64) *proc {
	id := fmt.Sprintf("%s-%d", class, i)
	args := []string{"serve", class, "--nats", s.url, "--log-level", "info"}
	switch class {
	case "rent":
		args = append(args, "--instance", id)
	case "run":
		args = append(args, "--node", id, "--node-cpu", strconv.FormatFloat(nodeCPU, 'f', -1, 64), "--node-memory", "1GiB",
			"--executor", "process", "--work-dir", filepath.Join(s.dir, id), "--grace", "1s")
	}
	p := startProc(s.t, s.dir, id, e31Bin, args...)
	s.services[class] = append(s.services[class], p)
	return p
}

// waitNATS waits until the server answers JetStream requests.
func (s *system) waitNATS() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		nc, err := nats.Connect(s.url)
		if err == nil {
			js, _ := jetstream.New(nc)
			_, err = js.AccountInfo(ctx)
			nc.Close()
			if err == nil {
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	s.t.Fatalf("nats-server at %s did not answer within 30s", s.url)
}

// connect opens a client connection that reconnects for ever.
func (s *system) connect() (*nats.Conn, jetstream.JetStream) {
	s.t.Helper()
	nc, err := nats.Connect(s.url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		s.t.Fatal(err)
	}
	return nc, js
}

// all lists every service process.
func (s *system) all() []*proc {
	var out []*proc
	for _, class := range []string{"submit", "rent", "output", "release", "ledger", "run"} {
		out = append(out, s.services[class]...)
	}
	return out
}

// crashed lists service processes that ended on their own: a service must
// carry on through faults, not exit.
func (s *system) crashed() []string {
	var out []string
	for _, p := range s.all() {
		if p.exited() {
			out = append(out, p.name)
		}
	}
	return out
}
