package rent

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/e31net/e31/pkg/events"
)

// devices are one node's GPUs, by UUID, as the log tells them: the ones
// its last announcement listed, in its (bus) order, which attempt holds
// each, and which the node withdrew. A node that announced a count of GPUs
// and no devices has none of this: its GPUs are a count in res alone, and
// its holds name no device. Like the rest of the pool, it is a fold of the
// log, so a RENT rebuilt from the log holds exactly the same devices free.
type devices struct {
	// order is the devices the node offers, as it announced them.
	order []string
	// heldBy is the job each held device is placed for. A device held
	// when its node announced again without it stays here until the job
	// gives it back, and is never free again.
	heldBy map[string]string
	// byJob is the devices each job holds here, in the order its
	// ComputeHeld named them (kept here, not in the job: a queued job
	// must stay small).
	byJob map[string][]string
	// withdrawn is the devices the node withdrew (DeviceWithdrawn), and
	// why, until it restores them or announces again.
	withdrawn map[string]string
}

// announced are the devices of an announcement that lists list; what old
// (the node's devices before, nil if none) had held stays held.
func announced(list []events.Device, old *devices) *devices {
	d := &devices{heldBy: map[string]string{}, byJob: map[string][]string{}, withdrawn: map[string]string{}}
	for _, dev := range list {
		d.order = append(d.order, strings.Clone(dev.UUID))
	}
	if old != nil {
		d.heldBy, d.byJob = old.heldBy, old.byJob
	}
	return d
}

// isFree reports whether u can be given to a job now.
func (d *devices) isFree(u string) bool {
	_, held := d.heldBy[u]
	_, out := d.withdrawn[u]
	return !held && !out
}

// free counts the devices that can be given to a job now.
func (d *devices) free() int64 {
	var n int64
	for _, u := range d.order {
		if d.isFree(u) {
			n++
		}
	}
	return n
}

// pick names n free devices, in the node's order, after the first skip
// free ones (which earlier placements of the same pass took). It returns
// nil if there are not that many.
func (d *devices) pick(n, skip int64) []string {
	if n <= 0 {
		return nil
	}
	out := make([]string, 0, n)
	for _, u := range d.order {
		if !d.isFree(u) {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		out = append(out, u)
		if int64(len(out)) == n {
			return out
		}
	}
	return nil
}

// take marks the devices a ComputeHeld names as held for job.
func (d *devices) take(job string, uuids []string) {
	if len(uuids) == 0 {
		return
	}
	uuids = clones(uuids)
	d.byJob[job] = uuids
	for _, u := range uuids {
		d.heldBy[u] = job
	}
}

// give frees the devices job held.
func (d *devices) give(job string) {
	for _, u := range d.byJob[job] {
		if d.heldBy[u] == job {
			delete(d.heldBy, u)
		}
	}
	delete(d.byJob, job)
}

// of is the devices job holds here, in its ComputeHeld's order; nil on a
// node without devices (d nil).
func (d *devices) of(job string) []string {
	if d == nil {
		return nil
	}
	return d.byJob[job]
}

// withdraw and restore apply the node's DeviceWithdrawn and
// DeviceRestored. A device the node did not announce is remembered as
// withdrawn all the same, so that the pool can say why it is missing.
func (d *devices) withdraw(u, reason string) { d.withdrawn[strings.Clone(u)] = strings.Clone(reason) }
func (d *devices) restore(u string)          { delete(d.withdrawn, u) }

// freeList lists the devices that can be given to a job now, in the
// node's order.
func (d *devices) freeList() []string {
	var out []string
	for _, u := range d.order {
		if d.isFree(u) {
			out = append(out, u)
		}
	}
	return out
}

// describe says, for Why, what of the node's devices is free, held and
// withdrawn; with redact, not which device is whose, nor why one was
// withdrawn beyond that it was.
func (d *devices) describe(redact bool) string {
	held := 0
	for _, u := range d.order {
		if _, ok := d.heldBy[u]; ok {
			held++
		}
	}
	s := fmt.Sprintf("%d of %d free, %d held", d.free(), len(d.order), held)
	if len(d.withdrawn) == 0 {
		return s
	}
	var w []string
	for _, u := range slices.Sorted(maps.Keys(d.withdrawn)) {
		if redact {
			w = append(w, u)
		} else {
			w = append(w, u+" ("+d.withdrawn[u]+")")
		}
	}
	return s + fmt.Sprintf(", %d withdrawn by the node: %s", len(w), strings.Join(w, "; "))
}

// gpuWait says why a job that needs GPUs waits for one on live, the live
// nodes of which at least one could hold it: "" unless GPUs are what it
// waits for (some node has as many free as it needs).
func gpuWait(live []*node, j *job, redact bool) string {
	if j.need.gpu <= 0 {
		return ""
	}
	var nodes []string
	for _, n := range live {
		if n.free().gpu >= j.need.gpu {
			return ""
		}
		if !n.couldHold(j) {
			continue
		}
		if n.devs != nil {
			nodes = append(nodes, n.name+": "+n.devs.describe(redact))
		} else {
			nodes = append(nodes, fmt.Sprintf("%s: %d of %d free", n.name, n.free().gpu, n.cap.gpu))
		}
	}
	return fmt.Sprintf("waiting for a GPU: it needs %d and no node has that many free (%s)", j.need.gpu, strings.Join(nodes, "; "))
}

// clones copies uuids, sharing no buffer they were decoded from (the pool
// keeps them as long as the job is placed).
func clones(uuids []string) []string {
	if len(uuids) == 0 {
		return nil
	}
	out := make([]string, len(uuids))
	for i, u := range uuids {
		out[i] = strings.Clone(u)
	}
	return out
}
