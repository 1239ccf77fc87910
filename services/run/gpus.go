package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/services/run/executor"
	"github.com/e31net/e31/services/run/gpu"
)

// The node's GPUs: what it offers, which job has each, which it withdrew.
//
// At start the node reads its devices where the driver lists them
// (gpu.Discover, under Config.GPURoot) and offers those Config.GPUs
// chooses; it announces each. Right after the announcement it withdraws
// (DeviceWithdrawn) a device its previous announcement listed, or --gpus
// names, that the driver no longer lists, and one that is unhealthy
// (gpu.Health). A hold that names a device the node does not offer, or one
// another job of this node holds, is refused: the attempt stops at once as
// node_lost, with the reason, and is held again. After a job's cgroup is
// empty, each device it held is checked again: one with compute processes
// left on it, or that the driver no longer lists, is withdrawn, and
// restored (DeviceRestored) once a later check finds it healthy.

// DefaultGPUCheck is how often a node checks whether a withdrawn device is
// healthy again.
const DefaultGPUCheck = 30 * time.Second

// nodeGPUs is a node's GPUs. Its methods are safe for concurrent use.
type nodeGPUs struct {
	driver  gpu.Driver
	offered []events.Device
	// missing are the devices --gpus names that the driver does not list.
	missing []string
	probe   gpu.Probe // nil without NVML
	params  string    // the driver's params with ModifyDeviceFiles: 0; "" without a driver
	log     *slog.Logger

	mu   sync.Mutex
	boot string
	// withdrawn are the devices withdrawn in this boot, and why.
	withdrawn map[string]string
	// changes counts each device's withdrawals and restorations in this
	// boot: the Change of its next event.
	changes map[string]int
	// inUse is the job each device is given to now.
	inUse map[string]string
}

// openGPUs finds the node's GPUs for cfg. A node with none offers none; a
// driver that cannot be read stops the node, as it would otherwise lose
// its GPUs without a word.
func openGPUs(cfg Config, log *slog.Logger) (*nodeGPUs, error) {
	choice, err := gpu.ParseChoice(cfg.GPUs)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	g := &nodeGPUs{log: log, withdrawn: map[string]string{}, changes: map[string]int{}, inUse: map[string]string{}}
	if choice.None {
		return g, nil
	}
	if g.driver, err = gpu.Discover(cfg.GPURoot); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	g.offered, g.missing = gpu.Choose(g.driver, choice)
	if len(g.offered) == 0 && len(g.missing) == 0 {
		return g, nil
	}
	if probe, err := gpu.OpenProbe(); err == nil {
		g.probe = probe
		for i, d := range g.offered {
			if m, err := probe.MemoryBytes(d.UUID); err == nil {
				g.offered[i].MemoryBytes = m
			}
		}
	} else {
		log.Info("no NVML: GPU utilisation and memory are not recorded, and compute processes left on a device are not seen", "err", err)
	}
	dir := cfg.WorkDir
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	params := filepath.Join(dir, ".nvidia-params")
	if ok, err := gpu.WriteParams(g.driver.Root, params); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	} else if ok {
		g.params = params
	}
	log.Info("GPUs found", "root", g.driver.Root, "offered", uuidsOf(g.offered), "missing", g.missing, "major", g.driver.Major, "uvm_major", g.driver.UVMMajor)
	return g, nil
}

func uuidsOf(devs []events.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.UUID
	}
	return out
}

// close lets NVML go.
func (g *nodeGPUs) close() {
	if g.probe != nil {
		_ = g.probe.Close()
	}
}

// previousDevices are the devices the node's last announcement listed,
// before this boot's: those the driver no longer lists are withdrawn.
func previousDevices(ctx context.Context, js jetstream.JetStream, node string) []string {
	subject, err := events.SubjectOf(node, &events.NodeAnnounced{Node: node})
	if err != nil {
		return nil
	}
	m, err := bus.Last(ctx, js, subject)
	if err != nil {
		return nil
	}
	env, err := events.Decode(m.Subject, m.Header, m.Data)
	if err != nil {
		return nil
	}
	ann, ok := env.Event.(*events.NodeAnnounced)
	if !ok {
		return nil
	}
	return uuidsOf(ann.Devices)
}

// announced starts a new boot: nothing is withdrawn in it yet (RENT starts
// the node's devices afresh from the announcement too). It returns what
// the node withdraws at once: a device before listed (before) or named
// (--gpus) that the driver no longer lists, and an offered device that is
// unhealthy and in no job's use.
func (g *nodeGPUs) announced(boot string, before []string) []events.DeviceWithdrawn {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.boot = boot
	clear(g.withdrawn)
	clear(g.changes)
	var out []events.DeviceWithdrawn
	gone := slices.Clone(g.missing)
	for _, u := range before {
		if _, ok := g.driver.Find(u); !ok && !slices.Contains(gone, u) {
			gone = append(gone, u)
		}
	}
	for _, u := range gone {
		out = append(out, g.withdrawLocked(u, "the node started without it: the driver no longer lists it (fallen off the bus, or removed)"))
	}
	for _, d := range g.offered {
		if _, busy := g.inUse[d.UUID]; busy {
			continue
		}
		if why := gpu.Health(g.driver.Root, g.probe, d); why != "" {
			out = append(out, g.withdrawLocked(d.UUID, "unhealthy when the node started: "+why))
		}
	}
	return out
}

func (g *nodeGPUs) withdrawLocked(uuid, reason string) events.DeviceWithdrawn {
	g.withdrawn[uuid] = reason
	g.changes[uuid]++
	return events.DeviceWithdrawn{Boot: g.boot, Device: uuid, Reason: reason, Change: g.changes[uuid]}
}

// refusal says why the node cannot give a hold its devices, "" when it
// can: it names a device the node does not offer, or one another job of
// the node has, or names fewer devices than it holds GPUs on a node that
// offers devices.
func (g *nodeGPUs) refusal(job string, h events.Hold) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, u := range h.GPUs {
		if !slices.ContainsFunc(g.offered, func(d events.Device) bool { return d.UUID == u }) {
			return fmt.Sprintf("the hold names GPU %s, which this node does not offer (it offers %s)", u, offeredList(g.offered))
		}
		if other, ok := g.inUse[u]; ok && other != job {
			return fmt.Sprintf("the hold names GPU %s, which job %s holds on this node", u, other)
		}
	}
	if len(g.offered) > 0 && len(h.GPUs) != h.GPU {
		return fmt.Sprintf("the hold names %d device(s) for %d GPU(s): this node gives GPUs by device", len(h.GPUs), h.GPU)
	}
	return ""
}

func offeredList(devs []events.Device) string {
	if len(devs) == 0 {
		return "none"
	}
	return strings.Join(uuidsOf(devs), ", ")
}

// refuse turns the start DecideStart chose into a stop, as node_lost
// with why, when the node cannot give the hold its devices: the job is
// held again, by a pool that knows better by then.
func refuse(decided []events.Event, held events.ComputeHeld, why string) []events.Event {
	if why == "" || len(decided) != 1 {
		return decided
	}
	if _, start := decided[0].(*events.RunStarted); !start {
		return decided
	}
	return []events.Event{&events.RunStopped{Hold: held.Hold, Outcome: events.NodeLost,
		Output: events.Collected{Files: []events.OutputFile{}, Missing: []string{}, Declared: held.Spec.Output},
		Reason: "the node refused the hold: " + why + "; it is held again"}}
}

// give gives the devices of the hold to job: what the executor makes of
// them, with the environment that tells the job. Give them back with
// done, once the job's cgroup is empty: it returns the withdrawals the
// devices' health then calls for.
func (g *nodeGPUs) give(job string, h events.Hold, env map[string]string) (executor.GPUs, func() []events.DeviceWithdrawn) {
	x := executor.GPUsFor(g.driver, g.offered, h.GPUs, g.params)
	x.Env(env)
	g.mu.Lock()
	for _, d := range x.Held {
		g.inUse[d.UUID] = job
	}
	g.mu.Unlock()
	return x, func() []events.DeviceWithdrawn {
		var out []events.DeviceWithdrawn
		for _, d := range x.Held {
			why := gpu.Health(g.driver.Root, g.probe, d)
			g.mu.Lock()
			if g.inUse[d.UUID] == job {
				delete(g.inUse, d.UUID)
			}
			if _, already := g.withdrawn[d.UUID]; why != "" && !already {
				out = append(out, g.withdrawLocked(d.UUID, fmt.Sprintf("after job %s ended: %s", job, why)))
			}
			g.mu.Unlock()
		}
		return out
	}
}

// restorable are the restorations due now: a withdrawn device the node
// offers, in no job's use, that is healthy again.
func (g *nodeGPUs) restorable() []events.DeviceRestored {
	g.mu.Lock()
	ids := make([]string, 0, len(g.withdrawn))
	for u := range g.withdrawn {
		ids = append(ids, u)
	}
	g.mu.Unlock()
	slices.Sort(ids)
	var out []events.DeviceRestored
	for _, u := range ids {
		i := slices.IndexFunc(g.offered, func(d events.Device) bool { return d.UUID == u })
		if i < 0 {
			continue // not offered in this boot: only a new boot offers it again
		}
		if gpu.Health(g.driver.Root, g.probe, g.offered[i]) != "" {
			continue
		}
		g.mu.Lock()
		if _, busy := g.inUse[u]; !busy {
			if _, still := g.withdrawn[u]; still {
				delete(g.withdrawn, u)
				g.changes[u]++
				out = append(out, events.DeviceRestored{Boot: g.boot, Device: u, Change: g.changes[u],
					Reason: "healthy again: the driver lists it and no compute process is on it"})
			}
		}
		g.mu.Unlock()
	}
	return out
}

// tell appends the node's device events, logging each; a failure is
// logged and not retried past retry.Record: RENT learns of a device at the
// latest when the node announces again.
func (s *Service) tell(ctx context.Context, evs ...events.Event) {
	for _, ev := range evs {
		switch e := ev.(type) {
		case *events.DeviceWithdrawn:
			e.Node = s.cfg.Node
			s.log.Warn("GPU withdrawn", "device", e.Device, "reason", e.Reason)
		case *events.DeviceRestored:
			e.Node = s.cfg.Node
			s.log.Info("GPU restored", "device", e.Device)
		}
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tryRequest)
		_, err := s.pub.Append(tctx, s.cfg.Node, ev)
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			s.log.Error("recording a GPU's state", "event", events.Name(ev.Type()), "err", err)
		}
	}
}

// withdrawals is evs as events to append.
func withdrawals(evs []events.DeviceWithdrawn) []events.Event {
	out := make([]events.Event, len(evs))
	for i := range evs {
		out[i] = &evs[i]
	}
	return out
}

// checkGPUs restores, every cfg.GPUCheck until ctx ends, the withdrawn
// devices found healthy again.
func (s *Service) checkGPUs(ctx context.Context) error {
	if len(s.gpus.offered) == 0 {
		return nil
	}
	t := time.NewTicker(s.cfg.GPUCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, r := range s.gpus.restorable() {
			s.tell(ctx, &r)
		}
	}
}
