package events

import (
	"fmt"
	"strconv"
	"strings"
)

// The subject grammar. This file is the only place that knows how e31's
// NATS subjects are spelled: everything else builds them with the functions
// below and reads them with ParseSubject, never with strings.Split. A
// subject is "e31." and then one of
//
//	job.<job>.<kind>                 an event of a job (kind: submitted, started, …)
//	job.<job>.held.<node>            ComputeHeld, on the node it holds
//	job.<job>.started.<node>         RunStarted, from the node that started it
//	job.<job>.stopped.<node>         RunStopped, from the node that stopped it
//	job.<job>.saved.<node>           CheckpointSaved, from the node that saved it
//	job.<job>.requested.<identity>   JobRequested, under its submitter
//	job.<job>.cancel.<identity>      CancelRequested, under its sender
//	job.<job>.delete.<identity>      DeleteRequested, under its sender
//	node.<node>.<kind>               an event of a node (announced, expired)
//	logs.<submitter>.<job>.<attempt>.<node>  what an attempt writes, as it comes
//	timer.at.<kind>.<job>            a timer while it waits
//	timer.due.<kind>.<job>           a timer once it fired
//	poison.<service>                 what a service could never handle
//	gate.<node>.<op>                 what a node asks of the node gate (pkg/gate)
//	gate.<node>.chunk.<session>      a piece of what a node puts through the gate
//
// Every <…> is one token that ValidID accepts, except <attempt>, a decimal
// number from 1 without leading zeros. The identity on a client's kinds is
// the last token so that the server's permissions (alice may publish only
// ….requested.alice) bind it to whoever published; so is the node on what a
// node publishes (node-1 may publish only ….started.node-1, ….stopped.node-1
// and its own logs), and a node's event is valid only where its body names
// that node (Decode), so that no node speaks for another.
//
// Before nodes were named in them, starts and stops were stored on
// job.<job>.started and job.<job>.stopped, and logs on
// logs.<submitter>.<job>.<attempt>. The log keeps what was stored so:
// ParseSubject still reads those subjects, KindSubjects still matches them,
// and Decode accepts an event stored on them. No node may publish on them
// any more (pkg/auth).

// Space is what a subject is about: the token after "e31.".
type Space string

// The spaces of e31's subjects.
const (
	SpaceJob    Space = "job"
	SpaceNode   Space = "node"
	SpaceLogs   Space = "logs"
	SpaceTimer  Space = "timer"
	SpacePoison Space = "poison"
	SpaceGate   Space = "gate"
)

// Subject is one subject of e31, read into its parts. The zero value of a
// field is "absent": which fields a Space uses is said on each.
type Subject struct {
	Space Space
	// Job is the job of SpaceJob, SpaceLogs and SpaceTimer.
	Job string
	// Node is the node of SpaceNode; the node a hold is for (Kind "held");
	// the node that sent a start or a stop (Kind "started", "stopped"),
	// absent on the subjects they were stored on before; and the node that
	// publishes an attempt's logs (SpaceLogs), likewise.
	Node string
	// Kind is the kind token of a job or node event ("submitted", "held",
	// "announced"), or a timer's kind ("expire").
	Kind string
	// Identity is who published a client's kinds (Kind "requested",
	// "cancel", "delete"), and the submitter of SpaceLogs.
	Identity string
	// Attempt is the attempt of SpaceLogs.
	Attempt int
	// Due says a timer fired (timer.due), rather than waits (timer.at).
	Due bool
	// Service is the service of SpacePoison.
	Service string
	// Session is the upload a chunk of SpaceGate is part of (Kind
	// "chunk"); the Kind of a gate subject is what the node asks.
	Session string
}

// The kind tokens whose subject carries one more token, and what it is.
const (
	kindHeld      = "held"
	kindStarted   = "started"
	kindStopped   = "stopped"
	kindSaved     = "saved"
	kindRequested = "requested"
	kindCancel    = "cancel"
	kindDelete    = "delete"
)

// ClientKind reports whether the subject is one a client publishes on its
// own tail (a request, a cancel, a deletion request): such an event is the
// client's word, checked by no service before it is stored.
func (s Subject) ClientKind() bool {
	return s.Space == SpaceJob && (s.Kind == kindRequested || s.Kind == kindCancel || s.Kind == kindDelete)
}

// NodesWord reports whether the subject is one a node publishes on under
// its own name (Node): a start or a stop of an attempt, what an attempt
// writes. Such a message is the node's word, which the server bound to
// the node and no service checked before it was stored; of a start or a
// stop, it counts only from the node the attempt was held on.
func (s Subject) NodesWord() bool {
	return s.Node != "" && (s.Space == SpaceLogs || s.Space == SpaceJob && (untailedBefore(s.Kind) || s.Kind == kindSaved))
}

// IsRequest reports whether the subject is a job's JobRequested.
func (s Subject) IsRequest() bool { return s.Space == SpaceJob && s.Kind == kindRequested }

// ErrSubject is returned by ParseSubject for a subject that is not e31's.
var ErrSubject = fmt.Errorf("events: not a subject of e31")

// ParseSubject reads a subject into its parts. It is strict: what it
// accepts, String gives back byte for byte, and what it refuses no e31
// service publishes.
func ParseSubject(subject string) (Subject, error) {
	s, ok := parseSubject(subject)
	if !ok {
		return Subject{}, fmt.Errorf("%w: %q", ErrSubject, subject)
	}
	return s, nil
}

// parseSubject is ParseSubject without the error, which would allocate:
// the ledger reads every subject of the log on every start.
func parseSubject(subject string) (Subject, bool) {
	rest, ok := strings.CutPrefix(subject, "e31.")
	if !ok {
		return Subject{}, false
	}
	space, rest, _ := strings.Cut(rest, ".")
	var t [5]string
	n := tokens(rest, t[:])
	if n < 0 {
		return Subject{}, false
	}
	switch Space(space) {
	case SpaceJob:
		s := Subject{Space: SpaceJob, Job: t[0], Kind: t[1]}
		switch {
		case n == 2 && (!tailed(t[1]) || untailedBefore(t[1])):
		case n == 3 && nodeTailed(t[1]):
			s.Node = t[2]
		case n == 3 && tailed(t[1]):
			s.Identity = t[2]
		default:
			return Subject{}, false
		}
		return s, true
	case SpaceNode:
		if n != 2 {
			return Subject{}, false
		}
		return Subject{Space: SpaceNode, Node: t[0], Kind: t[1]}, true
	case SpaceLogs:
		if n != 3 && n != 4 {
			return Subject{}, false
		}
		a, err := strconv.Atoi(t[2])
		if err != nil || a < 1 || strconv.Itoa(a) != t[2] {
			return Subject{}, false
		}
		return Subject{Space: SpaceLogs, Identity: t[0], Job: t[1], Attempt: a, Node: t[3]}, true
	case SpaceTimer:
		if n != 3 || (t[0] != "at" && t[0] != "due") {
			return Subject{}, false
		}
		return Subject{Space: SpaceTimer, Due: t[0] == "due", Kind: t[1], Job: t[2]}, true
	case SpacePoison:
		if n != 1 {
			return Subject{}, false
		}
		return Subject{Space: SpacePoison, Service: t[0]}, true
	case SpaceGate:
		switch {
		case n == 2 && t[1] != GateChunk:
			return Subject{Space: SpaceGate, Node: t[0], Kind: t[1]}, true
		case n == 3 && t[1] == GateChunk:
			return Subject{Space: SpaceGate, Node: t[0], Kind: t[1], Session: t[2]}, true
		}
	}
	return Subject{}, false
}

// tokens splits s at its dots into t, each a ValidID. It returns how
// many, or -1 for too many or one that is not valid.
func tokens(s string, t []string) int {
	n := 0
	for {
		tok, rest, more := strings.Cut(s, ".")
		if n == len(t) || !ValidID(tok) {
			return -1
		}
		t[n] = tok
		n++
		if !more {
			return n
		}
		s = rest
	}
}

// tailed reports whether a job event of kind carries one more token.
func tailed(kind string) bool {
	return nodeTailed(kind) || kind == kindRequested || kind == kindCancel || kind == kindDelete
}

// nodeTailed reports whether that token is a node: the node a hold is for,
// or the node that sent a start or a stop.
func nodeTailed(kind string) bool {
	return kind == kindHeld || kind == kindStarted || kind == kindStopped || kind == kindSaved
}

// untailedBefore reports whether a job event of kind was stored without its
// tail before it had one: starts and stops, before they named their node.
func untailedBefore(kind string) bool { return kind == kindStarted || kind == kindStopped }

// String is the subject the parts make: the inverse of ParseSubject. It
// does not check the parts: build with SubjectOf, RequestSubject and the
// like, which do, or from a parsed Subject.
func (s Subject) String() string {
	switch s.Space {
	case SpaceJob:
		switch {
		case nodeTailed(s.Kind) && (s.Node != "" || !untailedBefore(s.Kind)):
			return "e31.job." + s.Job + "." + s.Kind + "." + s.Node
		case nodeTailed(s.Kind):
		case tailed(s.Kind):
			return "e31.job." + s.Job + "." + s.Kind + "." + s.Identity
		}
		return "e31.job." + s.Job + "." + s.Kind
	case SpaceNode:
		return "e31.node." + s.Node + "." + s.Kind
	case SpaceLogs:
		if s.Node == "" {
			return "e31.logs." + s.Identity + "." + s.Job + "." + strconv.Itoa(s.Attempt)
		}
		return "e31.logs." + s.Identity + "." + s.Job + "." + strconv.Itoa(s.Attempt) + "." + s.Node
	case SpaceTimer:
		when := "at"
		if s.Due {
			when = "due"
		}
		return "e31.timer." + when + "." + s.Kind + "." + s.Job
	case SpacePoison:
		return "e31.poison." + s.Service
	case SpaceGate:
		if s.Kind == GateChunk {
			return "e31.gate." + s.Node + "." + s.Kind + "." + s.Session
		}
		return "e31.gate." + s.Node + "." + s.Kind
	}
	return ""
}

// JobOf is the job a subject is about (a job event's, a job's logs, a
// timer of a job), or "" if it names none.
func JobOf(subject string) string {
	s, _ := parseSubject(subject)
	return s.Job
}

// The filters: subjects with wildcards, for consumers and permissions.
const (
	// JobSubjects matches every job event: e31.job.<job>.<kind>[.<tail>].
	JobSubjects = "e31.job.>"
	// NodeSubjects matches every node event: e31.node.<node>.<kind>.
	NodeSubjects = "e31.node.>"
	// PoisonSubjects matches e31.poison.<service>.
	PoisonSubjects = "e31.poison.>"
	// TimerSubjects matches every timer: e31.timer.at.<kind>.<job> while it
	// waits, e31.timer.due.<kind>.<job> once it fired.
	TimerSubjects = "e31.timer.>"
	// TimerAtSubjects matches every waiting timer: what a service that sets
	// timers publishes on.
	TimerAtSubjects = "e31.timer.at.>"
)

// JobSubject is the subject of every event of one job: the filter for reading
// its history and the scope of its optimistic concurrency.
func JobSubject(job string) string { return "e31.job." + job + ".>" }

// HeldSubject is what a node's consumer filters on to see its own holds.
func HeldSubject(node string) string {
	return Subject{Space: SpaceJob, Job: "*", Kind: kindHeld, Node: node}.String()
}

// KindSubject matches one kind of job event for every job as it is stored
// now, e.g. "e31.job.*.submitted", or "e31.job.*.requested.*" for the kinds
// that end with a node or an identity. KindSubjects also matches where a
// kind was stored before.
func KindSubject(ceType string) string {
	return Subject{Space: SpaceJob, Job: "*", Kind: kinds[ceType].token, Node: "*", Identity: "*"}.String()
}

// KindSubjects matches one kind of job event for every job wherever it is
// stored: KindSubject and, for starts and stops, the subject they were
// stored on before they named their node. A consumer of a kind filters on
// all of them, or misses what the log kept from before.
func KindSubjects(ceType string) []string {
	out := []string{KindSubject(ceType)}
	if k := kinds[ceType].token; untailedBefore(k) {
		out = append(out, Subject{Space: SpaceJob, Job: "*", Kind: k}.String())
	}
	return out
}

// RequestSubject is where a submitter publishes a request for job: only
// there may it, with the permissions e31 gives submitters.
func RequestSubject(job, submitter string) string {
	return Subject{Space: SpaceJob, Job: job, Kind: kindRequested, Identity: submitter}.String()
}

// LogSubject is where node, which holds attempt of job, publishes what the
// attempt writes, as it comes, for its submitter's `e31 logs --follow`:
// plain NATS, stored nowhere, so that no one following costs nothing. Only
// the submitter (and the operator) may subscribe to LogSubjects(submitter),
// and only node may publish on NodeLogSubjects(node): a follower who
// listens to the node the attempt is held on hears no other.
func LogSubject(submitter, job string, attempt int, node string) string {
	return Subject{Space: SpaceLogs, Identity: submitter, Job: job, Attempt: attempt, Node: node}.String()
}

// LogSubjects matches every LogSubject of submitter's jobs; "*" for every
// submitter's.
func LogSubjects(submitter string) string { return "e31.logs." + submitter + ".>" }

// NodeLogSubjects matches every LogSubject node may publish on: the logs of
// any job, sent as itself.
func NodeLogSubjects(node string) string { return "e31.logs.*.*.*." + node }

// TimerSubject is where a timer of kind for job waits (due false) or is
// published once it fires (due true).
func TimerSubject(kind, job string, due bool) string {
	return Subject{Space: SpaceTimer, Kind: kind, Job: job, Due: due}.String()
}

// GateChunk is the kind of a gate subject that carries a piece of an
// upload (GateChunkSubject); every other kind is a request of its own.
const GateChunk = "chunk"

// GateSubject is where node asks the node gate (pkg/gate) for op: only
// node may publish under GateSubjects(node), so the gate knows who asks.
func GateSubject(node, op string) string {
	return Subject{Space: SpaceGate, Node: node, Kind: op}.String()
}

// GateChunkSubject is where node sends the pieces of the upload session
// the gate opened for it.
func GateChunkSubject(node, session string) string {
	return Subject{Space: SpaceGate, Node: node, Kind: GateChunk, Session: session}.String()
}

// GateSubjects matches everything node may ask of the gate; "*" for every
// node's (what the gate answers).
func GateSubjects(node string) string { return "e31.gate." + node + ".>" }

// PoisonSubject is where service puts what it could never handle.
func PoisonSubject(service string) string {
	return Subject{Space: SpacePoison, Service: service}.String()
}

// storedOn reports whether subj is SubjectOf(id, ev), ev being of kind k,
// without building it: Decode checks the subject of every event it reads.
func storedOn(subj, id string, k kind, ev Event) bool {
	if !ValidID(id) {
		return false
	}
	prefix := "e31.job."
	if IsNodeEvent(ev) {
		// A node's event speaks for the node its subject names: NodeExpired
		// is RENT's, but NodeAnnounced and the device events the node's
		// own (see the grammar).
		if n, ok := ev.(interface{ node() string }); ok && n.node() != id {
			return false
		}
		prefix = "e31.node."
	}
	rest, ok := strings.CutPrefix(subj, prefix)
	if !ok {
		return false
	}
	if rest, ok = cutToken(rest, id); !ok {
		return false
	}
	tail, _, ok := tailOf(ev)
	if !ok || rest == k.token && untailedBefore(k.token) {
		return rest == k.token
	}
	rest, ok = cutToken(rest, k.token)
	return ok && rest == tail && ValidID(tail)
}

// cutToken cuts tok and the dot after it from the front of s.
func cutToken(s, tok string) (string, bool) {
	if len(s) <= len(tok) || s[:len(tok)] != tok || s[len(tok)] != '.' {
		return "", false
	}
	return s[len(tok)+1:], true
}

// tailOf is the token some kinds of job event end with, and what it names:
// the node a hold is for, so that each node's consumer sees its own holds;
// the node that sent a start or a stop, the submitter of a request and the
// sender of a cancel or a deletion, so that the server's permissions (alice
// may publish only ...requested.alice, node-1 only ...stopped.node-1) bind
// the sender to the event. ok is false for the other kinds.
func tailOf(ev Event) (tail, what string, ok bool) {
	switch e := ev.(type) {
	case *ComputeHeld:
		return e.Node, "node", true
	case *RunStarted:
		return e.Node, "node", true
	case *RunStopped:
		return e.Node, "node", true
	case *CheckpointSaved:
		return e.Node, "node", true
	case *JobRequested:
		return e.Submitter, "submitter", true
	case *CancelRequested:
		return e.By, "by", true
	case *DeleteRequested:
		return e.By, "by", true
	}
	return "", "", false
}

// nodeEvent is implemented by the events about a node rather than a job:
// a node's boot, which its events' ids carry, tells one life of the node
// from the next.
type nodeEvent interface{ boot() string }

// IsNodeEvent reports whether ev is about a node rather than a job: it is
// stored under e31.node.<node>, its envelope's Subject is the node's id,
// and it belongs to no job's record. Its type alone says so, and Decode
// refuses one stored anywhere else, so a decoded envelope's subject says
// the same: readers need not parse it.
func IsNodeEvent(ev Event) bool {
	_, ok := ev.(nodeEvent)
	return ok
}

// SubjectOf is where an event about subject (a job or node id) is stored.
func SubjectOf(subject string, ev Event) (string, error) {
	if !ValidID(subject) {
		return "", fmt.Errorf("events: %q is not a valid id (letters, digits, '-' and '_', at most 64)", subject)
	}
	k, ok := kinds[ev.Type()]
	if !ok {
		return "", fmt.Errorf("%w %q", ErrUnknownType, ev.Type())
	}
	if IsNodeEvent(ev) {
		if n, ok := ev.(interface{ node() string }); ok && n.node() != subject {
			return "", fmt.Errorf("events: a %s about node %q names node %q", Name(ev.Type()), subject, n.node())
		}
		return Subject{Space: SpaceNode, Node: subject, Kind: k.token}.String(), nil
	}
	s := Subject{Space: SpaceJob, Job: subject, Kind: k.token}
	tail, what, ok := tailOf(ev)
	if !ok {
		return s.String(), nil
	}
	if !ValidID(tail) {
		return "", fmt.Errorf("events: %s %q is not a valid id (letters, digits, '-' and '_', at most 64)", what, tail)
	}
	if what == "node" {
		s.Node = tail
	} else {
		s.Identity = tail
	}
	return s.String(), nil
}
