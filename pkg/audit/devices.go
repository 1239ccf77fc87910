package audit

import (
	"fmt"
	"slices"

	"github.com/e31net/e31/pkg/events"
)

// Devices: the audit proves that no GPU was held by two attempts at once,
// as capacity proves that no node was held beyond what it announced. The
// log's order is the instant here too: a device is held from its
// attempt's ComputeHeld to its ComputeReleased, and another ComputeHeld
// naming it in between is a finding, whichever job or node it is for (a
// device's UUID is its identity everywhere). So is a hold that names a
// device its node's announcement in force did not list, the same device
// twice, or as many devices as it holds GPUs not. Written apart from
// RENT's and the ledger's code: the audit shares none of it.

// deviceHolder is who holds a device: the attempt, and where its hold is
// in the log.
type deviceHolder struct {
	key holdKey
	seq uint64
}

// announce keeps the devices a node's announcement in force lists.
func (n *node) announce(devs []events.Device) {
	n.devices = n.devices[:0]
	for _, d := range devs {
		n.devices = append(n.devices, d.UUID)
	}
}

// holdDevices takes the devices a ComputeHeld of job names.
func (a *Auditor) holdDevices(job string, f fact, e *events.ComputeHeld) {
	if len(e.GPUs) == 0 {
		return
	}
	key := holdKey{job, e.Attempt}
	if len(e.GPUs) != e.GPU {
		a.find(Finding{Job: job, Seq: f.seq, Kind: Inconsistent, Detail: fmt.Sprintf(
			"attempt %d holds %d gpu but names %d device(s): %v", e.Attempt, e.GPU, len(e.GPUs), e.GPUs)})
	}
	n := a.node(e.Node)
	for i, u := range e.GPUs {
		if slices.Contains(e.GPUs[:i], u) {
			a.find(Finding{Job: job, Seq: f.seq, Kind: Device, Detail: fmt.Sprintf(
				"attempt %d names device %s twice", e.Attempt, u)})
			continue
		}
		if n.announced && !slices.Contains(n.devices, u) {
			a.find(Finding{Job: job, Seq: f.seq, Kind: Device, Detail: fmt.Sprintf(
				"attempt %d holds device %s, which node %s did not announce", e.Attempt, u, e.Node)})
		}
		if h, held := a.devices[u]; held {
			a.find(Finding{Job: job, Seq: f.seq, Kind: Device, Detail: fmt.Sprintf(
				"device %s held by attempt %d of job %s while attempt %d of job %s holds it (held at #%d)",
				u, e.Attempt, job, h.key.attempt, h.key.job, h.seq)})
			continue
		}
		a.devices[u] = deviceHolder{key: key, seq: f.seq}
	}
}

// releaseDevices gives back the devices the attempt of key held.
func (a *Auditor) releaseDevices(key holdKey, gpus []string) {
	for _, u := range gpus {
		if a.devices[u].key == key {
			delete(a.devices, u)
		}
	}
}
