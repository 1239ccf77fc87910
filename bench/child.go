package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MaybeChild runs a part of a bench and exits, if this process was
// started again as one (the scheduler bench's renewers, renewersEnv; the
// history bench's server, serverEnv); otherwise it returns at once.
// cmd/e31 calls it first thing, as does this package's TestMain.
func MaybeChild() {
	for env, run := range map[string]func(ctx context.Context, spec []byte) (any, error){
		renewersEnv: runRenewers,
		serverEnv:   runServer,
	} {
		spec := os.Getenv(env)
		if spec == "" {
			continue
		}
		ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		// The parent closes our stdin to stop us, and so does its death: a
		// signal would not come from a parent that crashed. The process
		// ends with os.Exit below, this reader with it.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
		done, err := run(ctx, []byte(spec))
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", env, err)
			if done == nil {
				os.Exit(2)
			}
		}
		line, _ := json.Marshal(done)
		fmt.Println(string(line))
		os.Exit(0)
	}
}

// child is a process of this program started again as a part of a bench
// (MaybeChild), so that what it costs is measured apart: it runs until its
// stdin is closed, and its last line on stdout is its report, as JSON.
type child struct {
	what  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// first has the first line the child writes on stdout, once it has.
	first chan string
	// stopped is closed once the child has ended; last and waitErr are
	// set then.
	stopped chan struct{}
	last    string
	waitErr error
}

// startChild starts this program again as what, with env set to args as
// JSON.
func startChild(what, env string, args any) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	spec, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	c := &child{what: what, first: make(chan string, 1), stopped: make(chan struct{})}
	c.cmd = exec.Command(self)
	c.cmd.Env = append(os.Environ(), env+"="+string(spec))
	c.cmd.Stderr = os.Stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	go func() {
		defer close(c.stopped)
		lines := bufio.NewScanner(stdout)
		for n := 0; lines.Scan(); n++ {
			if n == 0 {
				c.first <- lines.Text()
			}
			c.last = lines.Text()
		}
		// Wait closes stdout: only once it is read to the end.
		c.waitErr = c.cmd.Wait()
	}()
	return c, nil
}

// firstLine waits for the child's first line on stdout, for at most
// patience.
func (c *child) firstLine(patience time.Duration) (string, error) {
	select {
	case line := <-c.first:
		return line, nil
	case <-c.stopped:
		select {
		case line := <-c.first: // said, then ended
			return line, nil
		default:
		}
		return "", fmt.Errorf("%s ended before it said anything: %v", c.what, c.waitErr)
	case <-time.After(patience):
		c.kill()
		return "", fmt.Errorf("%s said nothing in %s", c.what, patience)
	}
}

// stop closes the child's stdin, waits for it to end (a minute at most,
// then it is killed) and reads its report, the last line it wrote, into
// report if that is not nil.
func (c *child) stop(report any) error {
	_ = c.stdin.Close()
	select {
	case <-c.stopped:
	case <-time.After(time.Minute):
		c.kill()
	}
	if c.waitErr != nil {
		return fmt.Errorf("%s: %w", c.what, c.waitErr)
	}
	if report != nil && c.last != "" {
		if err := json.Unmarshal([]byte(c.last), report); err != nil {
			return fmt.Errorf("%s's last line %q: %w", c.what, c.last, err)
		}
	}
	return nil
}

// kill ends the child at once and waits for it.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.stopped
}

// cpu is the CPU time the child has used so far, as the kernel counts it
// (/proc/PID/stat, in clock ticks of 10 ms).
func (c *child) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("the CPU of %s: %w", c.what, err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis (utime and stime are fields 14, 15).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("the CPU of %s: %q is not a stat line", c.what, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("the CPU of %s: %q is not a stat line", c.what, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("the CPU of %s: %w", c.what, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}
