package audit

import (
	"fmt"
	"math"
	"strings"

	"github.com/e31net/e31/pkg/events"
)

// amount is an amount of compute; cpu in thousandths of a core, so that
// holding and releasing fractions adds up exactly.
type amount struct{ milliCPU, memory, gpu, disk int64 }

func amountOf(cpu float64, memory int64, gpu int, disk int64) amount {
	return amount{int64(math.Round(cpu * 1000)), memory, int64(gpu), disk}
}

// over lists what of a exceeds c, in words.
func (a amount) over(c amount) []string {
	var out []string
	if a.milliCPU > c.milliCPU {
		out = append(out, fmt.Sprintf("%g of %g cpu", float64(a.milliCPU)/1000, float64(c.milliCPU)/1000))
	}
	if a.memory > c.memory {
		out = append(out, fmt.Sprintf("%d of %d bytes of memory", a.memory, c.memory))
	}
	if a.gpu > c.gpu {
		out = append(out, fmt.Sprintf("%d of %d gpu", a.gpu, c.gpu))
	}
	if a.disk > c.disk {
		out = append(out, fmt.Sprintf("%d of %d bytes of disk", a.disk, c.disk))
	}
	return out
}

// node is what the log says of one node at the point being read.
type node struct {
	announced bool
	boot      string // the boot last announced
	expired   uint64 // sequence of the NodeExpired in force, or 0
	// unisolated is the sequence of the announcement in force if it said
	// isolation none without allow_unisolated, or 0: RENT holds nothing there.
	unisolated uint64
	cap, used  amount
	ids        []string
	// devices are the device UUIDs its announcement in force lists.
	devices []string
	// cardKey is the key the card of the announcement in force binds to
	// the node ("" for none: no card, or one the operator did not sign).
	cardKey string
}

type holdKey struct {
	job     string
	attempt int
}

// holdUse is one attempt's hold: where, and how much.
type holdUse struct {
	node string
	amt  amount
	gpus []string // the devices it names
	// cardKey is the key of the node's card when the attempt was held:
	// what its stop must be signed with ("" for none).
	cardKey string
}

func (a *Auditor) node(name string) *node {
	n := a.nodes[name]
	if n == nil {
		n = &node{}
		a.nodes[name] = n
	}
	return n
}

// nodeEvent takes a node's announcement or expiry.
func (a *Auditor) nodeEvent(f fact, name string) {
	n := a.node(name)
	for _, id := range n.ids {
		if id == f.id {
			a.find(Finding{Seq: f.seq, Kind: Duplicate, Detail: fmt.Sprintf("%s %s was already stored", events.Name(f.typ), f.id)})
			return
		}
	}
	n.ids = append(n.ids, f.id)
	switch e := f.ev.(type) {
	case *events.NodeAnnounced:
		n.announced, n.boot, n.expired, n.unisolated = true, e.Boot, 0, 0
		n.cap = amountOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes)
		n.announce(e.Devices)
		if e.Isolation == events.IsolationNone && !e.AllowUnisolated {
			n.unisolated = f.seq
		}
		key, wrong := a.cardOf(name, e.Card)
		n.cardKey = key
		if wrong != "" {
			a.find(Finding{Seq: f.seq, Kind: Signature, Detail: wrong})
		}
		if key != "" && a.opts.CardsKey != nil {
			// A card the operator signed: RENT holds the node to it, and
			// so does the audit.
			c := e.Card
			card := amountOf(c.CPU, c.MemoryBytes, c.GPU, c.DiskBytes)
			n.cap = amount{min(n.cap.milliCPU, card.milliCPU), min(n.cap.memory, card.memory), min(n.cap.gpu, card.gpu), min(n.cap.disk, card.disk)}
			if c.Isolation == events.IsolationNone && e.Isolation != events.IsolationNone && !e.AllowUnisolated {
				n.unisolated = f.seq
			}
		}
	case *events.NodeExpired:
		// The expiry of a boot the node has since replaced says nothing of
		// the node now.
		if e.Boot == n.boot {
			n.expired = f.seq
		}
	}
}

// capacity tracks what is held on each node at every point of the log, and
// finds the points where a node holds more than it has, or holds anything
// while expired or while it runs jobs unisolated without its operator's
// leave. A hold's disk is the node disk it took (request.disk and the
// staged inputs). What a release gives back is what its attempt's hold
// took, whatever the release says.
func (a *Auditor) capacity(jobID string, f fact) {
	switch e := f.ev.(type) {
	case *events.ComputeHeld:
		key := holdKey{jobID, e.Attempt}
		if _, held := a.holds[key]; held {
			return // the order check reports an attempt held twice
		}
		amt := amountOf(e.CPU, e.MemoryBytes, e.GPU, e.DiskBytes)
		n := a.node(e.Node)
		a.holds[key] = &holdUse{node: e.Node, amt: amt, gpus: e.GPUs, cardKey: n.cardKey}
		a.holdDevices(jobID, f, e)
		n.used = amount{n.used.milliCPU + amt.milliCPU, n.used.memory + amt.memory, n.used.gpu + amt.gpu, n.used.disk + amt.disk}
		switch {
		case !n.announced:
			a.find(Finding{Job: jobID, Seq: f.seq, Kind: Capacity, Detail: fmt.Sprintf(
				"attempt %d held on node %s, which never announced itself", e.Attempt, e.Node)})
		case n.expired > 0:
			a.find(Finding{Job: jobID, Seq: f.seq, Kind: Capacity, Detail: fmt.Sprintf(
				"attempt %d held on node %s, which expired at #%d and has not announced itself since", e.Attempt, e.Node, n.expired)})
		case n.unisolated > 0:
			a.find(Finding{Job: jobID, Seq: f.seq, Kind: Capacity, Detail: fmt.Sprintf(
				"attempt %d held on node %s, which announced isolation none without allow_unisolated at #%d", e.Attempt, e.Node, n.unisolated)})
		default:
			if over := n.used.over(n.cap); len(over) > 0 {
				a.find(Finding{Job: jobID, Seq: f.seq, Kind: Capacity, Detail: fmt.Sprintf(
					"node %s held beyond its capacity by attempt %d: %s", e.Node, e.Attempt, strings.Join(over, ", "))})
			}
		}
	case *events.ComputeReleased:
		key := holdKey{jobID, e.Attempt}
		h := a.holds[key]
		if h == nil {
			return // the order check reports a release of nothing held
		}
		delete(a.holds, key)
		a.releaseDevices(key, h.gpus)
		n := a.node(h.node)
		n.used = amount{n.used.milliCPU - h.amt.milliCPU, n.used.memory - h.amt.memory, n.used.gpu - h.amt.gpu, n.used.disk - h.amt.disk}
	}
}
