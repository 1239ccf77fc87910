package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/e31net/e31/pkg/events"
)

// Process runs a job as a plain child process in its own process group and
// working directory. It isolates nothing: it is for development on machines
// where the sandbox cannot run, and the baseline the sandbox is measured
// against. The job sees host paths in E31_DATA and E31_OUTPUT.
type Process struct {
	// Root is where job workspaces are made.
	Root string
}

var _ Isolator = (*Process)(nil)

// Isolation implements Isolator: none.
func (p *Process) Isolation() events.Isolation { return events.IsolationNone }

// IsolationOf implements Isolator: none, whatever the job.
func (p *Process) IsolationOf(Spec) events.Isolation { return events.IsolationNone }

// NewProcess returns a Process executor making workspaces under root.
func NewProcess(root string) (*Process, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("executor: workspace root: %w", err)
	}
	return &Process{Root: root}, nil
}

// processJob is the handle of a job Process prepared.
type processJob struct {
	guard Guard
	spec  Spec
	dirs  Dirs
}

// Spec implements Job.
func (j *processJob) Spec() Spec { return j.spec }

// Dirs implements Job.
func (j *processJob) Dirs() Dirs { return j.dirs }

// Run implements Job.
func (j *processJob) Run(ctx context.Context) (Result, error) {
	return j.guard.Run(j.spec.JobID, func() (Result, error) { return runProcess(ctx, j.spec, j.dirs) })
}

// Release implements Job: the workspace goes.
func (j *processJob) Release() error {
	return j.guard.Release(func() error { return os.RemoveAll(j.dirs.Root) })
}

// Prepare makes <root>/<job>-<attempt>/{data,out}. Disk is not bounded.
func (p *Process) Prepare(_ context.Context, spec Spec) (Job, error) {
	dir := filepath.Join(p.Root, fmt.Sprintf("%s-%d", spec.JobID, spec.Attempt))
	// A workspace left by a crash belongs to an attempt that is over.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("prepare %s: %w", spec.JobID, err)
	}
	j := &processJob{spec: spec, dirs: Dirs{Root: dir, DataDir: filepath.Join(dir, "data"), OutDir: filepath.Join(dir, "out")}}
	for _, d := range []string{j.dirs.DataDir, j.dirs.OutDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", spec.JobID, err)
		}
	}
	return j, nil
}

// runProcess runs the job as a child process in its own process group and
// waits until it is gone.
func runProcess(ctx context.Context, spec Spec, ws Dirs) (Result, error) {
	if len(spec.Command) == 0 {
		return Result{}, errors.New("executor: empty command")
	}
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	cmd.Dir = ws.Root
	cmd.Env = Environ(spec, Places{Data: ws.DataDir, Out: ws.OutDir, Home: ws.Root})
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var pipes *Pipes
	if spec.Stdout != nil && spec.Stderr != nil {
		var err error
		if pipes, err = OpenPipes(spec.Stdout, spec.Stderr); err != nil {
			return Result{}, err
		}
		defer pipes.Close()
		cmd.Stdout, cmd.Stderr = pipes.Stdout, pipes.Stderr
	} else if logf, err := os.Create(filepath.Join(ws.Root, "job.log")); err == nil {
		defer logf.Close()
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	res := Result{Started: time.Now()}
	if err := cmd.Start(); err != nil {
		res.Stopped = time.Now()
		res.Outcome = events.Failed
		res.Reason = fmt.Sprintf("could not start %s: %v", spec.Command[0], err)
		return res, nil
	}
	if pipes != nil {
		pipes.Started()
	}
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	werr, stop, _ := Watch(ctx, spec, res.Started, waited, nil, Signals{
		Term: func(Stop) { _ = syscall.Kill(-pgid, syscall.SIGTERM) },
		Kill: func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) },
	})
	// The first process is gone; anything it left in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if pipes != nil {
		// What the job wrote last is read before the result says it ended.
		// A process that left the group may hold a pipe: not for long.
		pipes.Wait(2 * time.Second)
	}
	res.Stopped = time.Now()
	if st := cmd.ProcessState; st != nil {
		res.Usage.CPUSeconds = (st.UserTime() + st.SystemTime()).Seconds()
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
			res.Usage.MaxRSSBytes = ru.Maxrss * 1024
		}
	}
	switch {
	case stop.Outcome != "":
		res.Outcome, res.Reason = stop.Outcome, stop.Reason
	default:
		code := cmd.ProcessState.ExitCode()
		var exitErr *exec.ExitError
		if errors.As(werr, &exitErr) && code < 0 {
			res.Outcome = events.Failed
			res.Reason = "killed by " + exitErr.String()
			break
		}
		res.ExitCode = &code
		if code == 0 {
			res.Outcome = events.Succeeded
		} else {
			res.Outcome = events.Failed
			res.Reason = fmt.Sprintf("exited with code %d", code)
		}
	}
	return res, nil
}
