//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/e31net/e31/services/run/executor/internal/workspace"
)

// A slot is what a job runs in that outlives it: a workspace directory, a
// cgroup and a network namespace. Making and removing those is most of what
// a trivial job would otherwise cost (a directory on the node's disk, a
// cgroup in every hierarchy, a network namespace whose creation and
// teardown the kernel serializes), so Release gives its slot back, emptied,
// and the next Prepare takes it up again.
//
// A slot goes back only without anything of the job: its writable space
// holding /out, /tmp and the logs is emptied (its subvolume of the node's
// job disk, or a tmpfs that is unmounted: every job gets a new one), data/ is
// emptied, the cgroup is empty and its memory reclaimed (jobCgroup.idle),
// and the network namespace shows nothing the job did (netns.dirty). What
// fails a check is dropped and made anew for the next job; see doc.go.
type slot struct {
	name string // of the workspace directory and, with the root's tag, the cgroup
	ws   *workspace.Dir
	cg   jobCgroup // nil until made
	net  *netns    // nil until made
	// idleSince is when the slot was last given back.
	idleSince time.Time
}

// maxIdleLaunchers bounds the threads an executor keeps to start jobs (see
// launchers).
const maxIdleLaunchers = 64

// maxIdleSlots bounds the slots an executor keeps for later jobs: beyond,
// a released slot is removed. A network namespace costs a few hundred KiB.
const maxIdleSlots = 128

// slotIdleTTL is how long a slot may wait for a job before it is removed
// (when the next slot is given back).
const slotIdleTTL = time.Minute

// slotSeq numbers the slots of every executor in the process, so that two
// executors over one root (a node agent replacing another in tests) never
// share a name.
var slotSeq atomic.Int64

// slotName is a new slot's name: slotPrefix, this process's pid (see
// removeStaleDirs) and a number.
func slotName() string {
	return fmt.Sprintf("%s%d.%d", slotPrefix, os.Getpid(), slotSeq.Add(1))
}

// takeSlot returns the slot given back last, or a new one with only its
// directories.
func (e *Executor) takeSlot() (*slot, error) {
	e.mu.Lock()
	if n := len(e.idle); n > 0 {
		s := e.idle[n-1]
		e.idle = e.idle[:n-1]
		e.mu.Unlock()
		return s, nil
	}
	// After Close the job disk is given back: a slot made then, which
	// serves one job, has a tmpfs.
	disk := e.disk
	if e.closed {
		disk = nil
	}
	e.mu.Unlock()
	s := &slot{name: slotName()}
	ws, err := workspace.Create(e.cfg.Root, s.name)
	if err != nil {
		if ws != nil {
			_ = ws.Remove()
		}
		return nil, err
	}
	if disk != nil {
		if err := ws.Attach(disk); err != nil {
			_ = ws.Remove()
			return nil, err
		}
	}
	s.ws = ws
	return s, nil
}

// clearSlot takes what a job left out of its slot, once no process of the
// job is left, dropping the parts that cannot serve another job.
func (e *Executor) clearSlot(s *slot, log *slog.Logger) error {
	if err := s.ws.Clear(); err != nil {
		return err
	}
	if s.net != nil {
		why := s.net.dirty()
		if why != "" {
			log.Debug("network namespace not reused", "why", why)
			s.net.close()
			s.net = nil
		}
	}
	idle := s.cg != nil && s.cg.idle()
	if s.cg != nil && !idle {
		if err := s.cg.remove(); err != nil {
			return fmt.Errorf("remove cgroup: %w", err)
		}
		s.cg = nil
	}
	return nil
}

// putSlot keeps a cleared slot for a later job, or removes it when the
// executor is closed or keeps enough already. It also removes the slots
// idle for longer than slotIdleTTL.
func (e *Executor) putSlot(s *slot, log *slog.Logger) {
	now := time.Now()
	s.idleSince = now
	var drop []*slot
	e.mu.Lock()
	if e.closed || len(e.idle) >= maxIdleSlots {
		drop = append(drop, s)
	} else {
		e.idle = append(e.idle, s)
	}
	for len(e.idle) > 0 && now.Sub(e.idle[0].idleSince) > slotIdleTTL {
		drop = append(drop, e.idle[0])
		e.idle = e.idle[1:]
	}
	e.mu.Unlock()
	for _, d := range drop {
		e.destroySlot(d, log)
	}
}

// destroySlot removes what a slot holds; errors are logged.
func (e *Executor) destroySlot(s *slot, log *slog.Logger) {
	if err := s.remove(); err != nil {
		log.Warn("remove slot", "slot", s.name, "err", err)
	}
}

func (s *slot) remove() error {
	var errs []error
	if s.net != nil {
		s.net.close()
		s.net = nil
	}
	if s.cg != nil {
		if err := s.cg.remove(); err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
		}
		s.cg = nil
	}
	if s.ws != nil {
		if err := s.ws.Remove(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close removes the slots the executor keeps for later jobs (see slot) and
// ends its idle launcher threads (see launchers), and makes Release remove
// the slots of the jobs still prepared. Prepare and Run still work after
// Close, at the cost of a new slot and thread per job.
func (e *Executor) Close() error {
	e.launchers.close()
	e.mu.Lock()
	first := !e.closed
	e.closed = true
	idle := e.idle
	e.idle = nil
	e.mu.Unlock()
	var errs []error
	for _, s := range idle {
		if err := s.remove(); err != nil {
			errs = append(errs, fmt.Errorf("sandbox: remove slot %s: %w", s.name, err))
		}
	}
	if first {
		if err := e.closeDisk(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
