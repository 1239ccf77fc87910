package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every command block of e31's documents is run by a test as it is written,
// so that a document cannot drift from the program. shellBlocks reads a
// document's fenced blocks; the tests run them in order, in a directory and
// network of their own. A block that cannot run in a test says why in the
// document, on a line of its own before its fence (blank lines between
// are allowed, nothing else):
//
//	<!-- not run: why -->            the test skips it (the reason is required)
//	<!-- in the background: why -->  the test starts it and leaves it running
//	                                 while the blocks after it run (a server)
//
// Every fence must name its language: sh, bash or shell for commands (run),
// console for a transcript (its "$ " lines are the commands), anything else
// (text, yaml, go, …) for what is not a command. A fence without one is an
// error, so that a block of commands cannot escape the tests untagged.

// block is one fenced block of commands in a document.
type block struct {
	// Path and Line say where the block's first command is.
	Path string
	Line int
	// Shell runs the commands: "sh" or "bash".
	Shell string
	// Commands are the block's commands, as written.
	Commands string
	// NotRun is the reason a `<!-- not run: … -->` marker gives; "" if the
	// block is to be run.
	NotRun string
	// Background says a `<!-- in the background: … -->` marker asks the
	// block to be started and left running (a server the blocks after it
	// talk to).
	Background bool
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.Path, b.Line) }

var (
	fenceRE  = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^`\\s]*)")
	markerRE = regexp.MustCompile(`^<!--\s*(not run|in the background)\s*:\s*(.*?)\s*-->$`)
)

// shellBlocks returns the blocks of commands of the markdown file at path,
// in the order they are written. It fails t on a fence without a language,
// a marker without a reason, and a marker that stands before anything other
// than a block of commands.
func shellBlocks(t testing.TB, path string) []block {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("read the document: %v", err)
	}
	defer f.Close()
	var (
		blocks []block
		marker []string // the marker on the last non-blank line, if any
		markAt int
		fence  string // the open fence, "" outside a block
		cur    *block
		lang   string
		lines  []string
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if fence != "" {
			if strings.HasPrefix(strings.TrimLeft(line, " "), fence) && strings.Trim(strings.TrimSpace(line), fence[:1]) == "" {
				if cur != nil {
					cur.Commands = commandsOf(lang, lines)
					if strings.TrimSpace(cur.Commands) == "" {
						t.Errorf("%s: a %s block without a command", cur, lang)
					} else {
						blocks = append(blocks, *cur)
					}
				}
				fence, cur, lines = "", nil, nil
				continue
			}
			lines = append(lines, line)
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			fence, lang = m[1], m[2]
			mark := marker
			marker = nil
			switch lang {
			case "":
				t.Errorf("%s:%d: a fenced block without a language: tag it (sh for commands, text or yaml for the rest)", path, n)
			case "sh", "shell", "bash", "console":
				shell := "sh"
				if lang == "bash" {
					shell = "bash"
				}
				cur = &block{Path: path, Line: n + 1, Shell: shell}
				if mark != nil {
					if mark[1] == "not run" {
						cur.NotRun = mark[2]
					} else {
						cur.Background = true
					}
				}
			default:
				if mark != nil {
					t.Errorf("%s:%d: a %q marker before a %s block, which is not run anyway", path, n-1, mark[1], lang)
				}
			}
			continue
		}
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			continue
		}
		if m := markerRE.FindStringSubmatch(trimmed); m != nil {
			if m[2] == "" {
				t.Errorf("%s:%d: %q needs a reason", path, n, m[1])
			}
			marker, markAt = m, n
			continue
		}
		if marker != nil {
			t.Errorf("%s:%d: a %q marker not followed by a block", path, markAt, marker[1])
			marker = nil
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if fence != "" {
		t.Errorf("%s: a fence is never closed", path)
	}
	return blocks
}

// commandsOf is a block's script: its lines, or a console transcript's
// "$ " lines (and the lines continuing them, after a trailing backslash).
func commandsOf(lang string, lines []string) string {
	if lang != "console" {
		return strings.Join(lines, "\n") + "\n"
	}
	var b strings.Builder
	cont := false
	for _, l := range lines {
		switch {
		case cont:
		case strings.HasPrefix(l, "$ "):
			l = strings.TrimPrefix(l, "$ ")
		default:
			continue // output
		}
		b.WriteString(l + "\n")
		cont = strings.HasSuffix(l, "\\")
	}
	return b.String()
}

// docRun runs a document's blocks in a directory of their own.
type docRun struct {
	t   testing.TB
	dir string
	env []string
	// running are the background blocks started, stopped when the test ends.
	running []*exec.Cmd
}

// command is how b's commands are run: in the block's shell, with -e, so
// that any command that fails fails the block, as a reader would notice.
func (r *docRun) command(b block) *exec.Cmd {
	cmd := exec.Command(b.Shell, "-e", "-c", b.Commands)
	cmd.Dir = r.dir
	cmd.Env = r.env
	// Its own process group, so that stopping it reaches what it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// run runs one block to its end and returns its stdout; the test fails,
// showing what the block wrote, unless it exits 0 within timeout.
func (r *docRun) run(b block, timeout time.Duration) string {
	r.t.Helper()
	cmd := r.command(b)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("%s: %v", b, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = fmt.Errorf("still running after %s: %v", timeout, <-done)
	}
	if err != nil {
		r.t.Fatalf("%s: the block as written fails: %v\n--- block\n%s--- stdout\n%s--- stderr\n%s", b, err, b.Commands, stdout.String(), stderr.String())
	}
	r.t.Logf("%s: ran in %s", b, time.Since(start).Round(time.Millisecond))
	return stdout.String()
}

// start starts a background block, writing to log, and stops it (SIGTERM
// to its process group, then SIGKILL) when the test ends.
func (r *docRun) start(b block, log string) *exec.Cmd {
	r.t.Helper()
	f, err := os.Create(log)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := r.command(b)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		r.t.Fatalf("%s: %v", b, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	r.t.Cleanup(func() {
		pg := -cmd.Process.Pid
		_ = syscall.Kill(pg, syscall.SIGTERM)
		// The shell may end before what it started (e31 dev still
		// stopping, writing in the directory about to be removed): wait
		// for the whole process group, which lives while any of it does.
		deadline := time.Now().Add(30 * time.Second)
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			_ = syscall.Kill(pg, syscall.SIGKILL)
			<-done
		}
		for syscall.Kill(pg, 0) == nil {
			if time.Now().After(deadline) {
				r.t.Errorf("%s: still running 30s after SIGTERM: killed", b)
				_ = syscall.Kill(pg, syscall.SIGKILL)
				break
			}
			time.Sleep(10 * time.Millisecond) // a process's end, which has no event to wait on here
		}
		if r.t.Failed() {
			if out, err := os.ReadFile(log); err == nil {
				r.t.Logf("%s wrote:\n%s", b, tail(string(out), 60))
			}
		}
	})
	r.running = append(r.running, cmd)
	return cmd
}

// runAll runs every block of the document in order: a block marked not run
// is skipped (and logged with its reason), a background block is started
// and then ready is called with it, to wait until it serves; any other is
// run to its end. So no block can be left out without a marker saying why.
func (r *docRun) runAll(blocks []block, ready func(block)) {
	r.t.Helper()
	if len(blocks) == 0 {
		r.t.Fatal("no blocks of commands: the document moved?")
	}
	for i, b := range blocks {
		switch {
		case b.NotRun != "":
			r.t.Logf("%s: not run: %s", b, b.NotRun)
		case b.Background:
			start := time.Now()
			r.start(b, filepath.Join(r.dir, fmt.Sprintf("block-%d.log", i)))
			ready(b)
			r.t.Logf("%s: started in the background, serving after %s", b, time.Since(start).Round(time.Millisecond))
		default:
			r.run(b, 3*time.Minute)
		}
	}
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// ownNetwork moves the test's goroutine into a network namespace of its
// own, with only a loopback interface: the documents' commands use e31's
// default addresses (127.0.0.1:4222, :8031) as written, and on a machine
// shared with other e31s they must not meet them. Every process the test
// starts afterwards is started from this goroutine, so in this namespace
// (a child is forked from the thread that starts it). The thread is never
// unlocked: it ends with the test's goroutine.
func ownNetwork(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace of its own, and the sandbox of the e31 dev the documents start")
	}
	runtime.LockOSThread()
	if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
		t.Fatalf("a network namespace of the test's own: %v", err)
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v: %s", err, out)
	}
}

// unmountUnder detaches whatever is still mounted under dir (the job disk
// of an e31 dev that could not stop cleanly), so that dir can be removed.
func unmountUnder(t testing.TB, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			if err := syscall.Unmount(f[4], syscall.MNT_DETACH); err == nil {
				t.Logf("unmounted %s, left by the documents' e31 dev", f[4])
			}
		}
	}
}
