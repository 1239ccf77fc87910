//go:build linux

package sandbox

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// launchers keeps the threads that started a job, once the job is over, to
// start later ones. A thread made for one job pays for being made, for
// no_new_privs, an empty capability bounding set and a seccomp filter
// (which the kernel compiles anew for each thread), and for being thrown
// away: about a third of a millisecond of CPU here, a tenth of a trivial
// job's cost. A kept thread has all three already (a filter cannot be taken
// off, and the others are what every job needs anyway), and it has left
// every namespace of its job (reset) before it is offered again: a job
// finds it as a new thread would be, but for the restrictions.
//
// Its methods are safe for concurrent use.
type launchers struct {
	host []hostNS
	reqs chan launchReq
	quit chan struct{}

	mu      sync.Mutex
	idle    int
	closed  bool
	maxIdle int
}

type hostNS struct {
	fd   int
	kind int // CLONE_NEW*
}

type launchReq struct {
	l     *launch
	start chan<- started
	done  chan<- exited
}

// launcherIdleTTL is how long a kept thread waits for a job before it ends.
const launcherIdleTTL = 30 * time.Second

// hostNamespaces are the process's own mount, pid, IPC, UTS, network and
// cgroup namespaces, which a launcher thread goes back to after a job. They are
// the main thread's: no thread of ours leaves them but launchers and the
// like, and those never run on the main thread (see onOwnThread).
var hostNamespaces = sync.OnceValues(func() ([]hostNS, error) {
	var host []hostNS
	for _, ns := range []struct {
		name string
		kind int
	}{{"mnt", unix.CLONE_NEWNS}, {"pid", unix.CLONE_NEWPID}, {"ipc", unix.CLONE_NEWIPC}, {"uts", unix.CLONE_NEWUTS}, {"net", unix.CLONE_NEWNET}, {"cgroup", unix.CLONE_NEWCGROUP}} {
		fd, err := unix.Open("/proc/self/ns/"+ns.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, h := range host {
				unix.Close(h.fd)
			}
			return nil, fmt.Errorf("open %s namespace: %w", ns.name, err)
		}
		host = append(host, hostNS{fd: fd, kind: ns.kind})
	}
	return host, nil
})

func newLaunchers(maxIdle int) (*launchers, error) {
	host, err := hostNamespaces()
	if err != nil {
		return nil, err
	}
	return &launchers{host: host, reqs: make(chan launchReq), quit: make(chan struct{}), maxIdle: maxIdle}, nil
}

// run starts l on a kept thread, or on a new one if none is idle, and
// returns at once; the thread reports on start and done (see launch.launch).
func (p *launchers) run(l *launch, start chan<- started, done chan<- exited) {
	r := launchReq{l: l, start: start, done: done}
	select {
	case p.reqs <- r:
		return
	default:
	}
	go onOwnThread(func() { p.serve(r) })
}

// serve runs on a thread of its own, locked for good: it starts jobs until
// it is not wanted any more or cannot be made clean, and then returns, and
// the runtime throws the thread away.
func (p *launchers) serve(r launchReq) {
	// Once per thread, before anything of a job: see launch.restrict.
	if err := r.l.restrict(); err != nil {
		r.start <- started{err: err}
		return
	}
	for {
		if !r.l.launch(r.start, r.done) || !p.reset() {
			return
		}
		p.mu.Lock()
		if p.closed || p.idle >= p.maxIdle {
			p.mu.Unlock()
			return
		}
		p.idle++
		p.mu.Unlock()
		t := time.NewTimer(launcherIdleTTL)
		ok := false
		select {
		case r = <-p.reqs:
			ok = true
		case <-t.C:
		case <-p.quit:
		}
		t.Stop()
		p.mu.Lock()
		p.idle--
		p.mu.Unlock()
		if !ok {
			return
		}
	}
}

// reset takes the calling thread out of a job's namespaces, back to the
// process's own, as exiting would: the job's mount tree (its tmpfs clones
// included), IPC objects and pid namespace go with the last reference. It
// reports false if any step failed; the thread must then end.
func (p *launchers) reset() bool {
	for _, ns := range p.host {
		if err := unix.Setns(ns.fd, ns.kind); err != nil {
			return false
		}
	}
	return true
}

// close makes the idle threads end, and the busy ones once their job is
// over.
func (p *launchers) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.quit)
	}
	p.mu.Unlock()
}
