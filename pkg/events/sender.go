package events

// What a run node says is the word of one node: its announcement, and the
// start and the stop of each attempt held on it. Each is stored on a
// subject that ends with the node that sent it (see the grammar in
// subject.go), which the server's permissions let only that node publish
// on, and each decodes only where its body names the same node (Decode). So
// the node in such an event is who sent it; but any node may send one about
// any job. An attempt is the business of the node it was held on alone:
// every reader sets aside a start or a stop from any other node, through
// FromHolder, and changes nothing for it.
//
// A kind of event a node comes to publish later about an attempt (a
// checkpoint it saved, a device it saw fail) is added to nodeKinds and to
// the switch in FromHolder, and is stored on a subject that ends with the
// node: every reader then sets it aside as it does a start or a stop.

// nodeKinds are the event types a run node publishes, each on a subject
// that ends with the node (NodeAnnounced's is e31.node.<node>.announced).
var nodeKinds = []string{TypeNodeAnnounced, TypeRunStarted, TypeRunStopped, TypeCheckpointSaved}

// NodeKinds lists the event types a run node publishes: the only ones its
// permissions let it publish, each under its own name.
func NodeKinds() []string { return append([]string(nil), nodeKinds...) }

// SenderOf is the node that sent ev, an event a node publishes about an
// attempt (RunStarted, RunStopped), and false for any other event. The
// node is the body's, which Decode holds to the node its subject names,
// and the server's permissions to the node that published it. Of an event
// stored before starts and stops named their node (no node in the
// subject), the body is all there is to go by.
func SenderOf(ev Event) (string, bool) {
	switch e := ev.(type) {
	case *RunStarted:
		return e.Node, true
	case *RunStopped:
		return e.Node, true
	case *CheckpointSaved:
		return e.Node, true
	}
	return "", false
}

// FromHolder reports whether ev may act on the attempt it is about, which
// was held on node heldOn: any event but a node's may; a node's (SenderOf)
// only if heldOn sent it. Every reader that acts on a node's event about an
// attempt asks it first, with the node of the attempt's ComputeHeld, and
// sets aside what it refuses: a compromised node may publish a start or a
// stop of any job under its own name, and that must change nothing of a job
// held elsewhere.
func FromHolder(ev Event, heldOn string) bool {
	sender, ok := SenderOf(ev)
	return !ok || sender == heldOn
}

// HeldOn is the node attempt was held on, as the job's history says (its
// ComputeHeld), and false when the history holds no hold of that attempt.
func HeldOn(history []Envelope, attempt int) (string, bool) {
	for _, e := range history {
		if h, ok := e.Event.(*ComputeHeld); ok && h.Attempt == attempt {
			return h.Node, true
		}
	}
	return "", false
}
