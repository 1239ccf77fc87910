package auth

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/limits"
	"github.com/e31net/e31/pkg/query/wire"
)

// owned is the event types each service appends: the only events it may
// publish. It is read off the services' code (every Append, AppendBatch and
// React of a bus Publisher) and checked against it by cmd/e31's integration
// tests, which run every service under exactly these permissions.
var owned = map[string][]string{
	SubmitService:  {events.TypeJobSubmitted, events.TypeJobRejected},
	RentService:    {events.TypeComputeHeld, events.TypeJobCancelled, events.TypeJobRejected, events.TypeHoldLost, events.TypeNodeExpired, events.TypeHoldExpired},
	RunService:     {events.TypeRunStarted, events.TypeRunStopped, events.TypeCheckpointSaved, events.TypeNodeAnnounced, events.TypeDeviceWithdrawn, events.TypeDeviceRestored},
	OutputService:  {events.TypeOutputReturned, events.TypeDeleted},
	ReleaseService: {events.TypeComputeReleased},
	LedgerService:  {},
}

// submitted is the event types a submitter appends, each on a subject that
// ends with its own name.
var submitted = []string{events.TypeJobRequested, events.TypeCancelRequested, events.TypeDeleteRequested}

// Owned returns the event types service may append.
func Owned(service string) []string { return slices.Clone(owned[service]) }

// responseTTL is how long a service may answer a request it received. The
// ledger holds a long poll up to 30 s; the margin covers a slow reply.
const responseTTL = time.Minute

// Permissions returns the NATS permissions of id. This is the one place
// that says what each role may do:
//
//   - everyone: subscribe to its own inbox prefix, and ask JetStream whether
//     it is there ($JS.API.INFO, which shows only the account's totals);
//   - a submitter: publish its requests and cancels (their subjects end
//     with its name), ask the query services as itself (e31.api.<name>.>),
//     read (direct gets, no consumers) and write its own data bucket, read
//     its own limits, and subscribe to what its running jobs write
//     (events.LogSubjects). It reads nothing of the log: publishing into
//     the log needs no JetStream API, only the PubAck on its inbox. It is
//     in the TENANTS account, and all of this reaches E31 through its
//     imports (keys.go);
//   - the auditor: read the whole log (ordered consumers and direct gets on
//     the E31 stream) and ask the query services as "auditor"; nothing it
//     may publish changes anything;
//   - the operator: everything;
//   - a run node (service run, in the NODES account): its own events and
//     lease, its two consumers, the log read, the node gate (nodePermissions);
//   - any other service: the event types its step owns (Owned), its poison
//     subject, reading the streams it consumes with acks for its consumers,
//     and what its step needs besides (leases, data buckets, timers, its
//     query endpoints, answered with response permissions).
func Permissions(id Identity) (jwt.Permissions, error) {
	if err := id.Validate(); err != nil {
		return jwt.Permissions{}, err
	}
	var g grant
	g.sub(id.InboxPrefix() + ".>")
	g.pub(jsAPI + "INFO")
	switch id.Role {
	case Operator:
		g.pub(">")
		g.sub(">")
	case Submitter:
		for _, t := range submitted {
			g.pub(subjectOf(t, "*", id.Name))
		}
		g.pub(wire.UserSubjects(id.Name))
		g.pub(DataBucketSubjects(id.Name)...)
		g.pub(LimitsSubjects(id.Name)...)
		// What its running jobs write, as nodes publish it (e31 logs --follow).
		g.sub(events.LogSubjects(id.Name))
	case Auditor:
		g.pub(wire.UserSubjects(AuditorName))
		g.pub(streamInfo(events.Stream))
		g.pub(readMessages(events.Stream)...)
		// Ordered consumers: the auditor's reads. It may not delete
		// consumers (the services' durables among them); its ordered
		// consumers go away on their own once idle.
		g.pub(consume(events.Stream, false)...)
		// The ledger's records and its checkpoint, read where the ledger
		// keeps them to compare with those the audit rebuilds: what the
		// auditor reads of every tenant's jobs in the log already, in
		// another form. Read only: nothing of it may be written.
		// Nor may it delete the ledger's own consumers.
		ledger := events.KVStream(events.LedgerBucket)
		g.pub(streamInfo(ledger))
		g.pub(readMessages(ledger)...)
		g.pub(consume(ledger, false)...)
	case Service:
		if id.IsNode() {
			nodePermissions(&g, id)
		} else {
			servicePermissions(&g, id)
		}
	}
	return g.permissions(), nil
}

// nodePermissions adds what a run node needs, in the NODES account, all of
// it through its imports (keys.go) and all of it under its own name:
//
//   - its events (NodeAnnounced, DeviceWithdrawn, DeviceRestored,
//     RunStarted, RunStopped, CheckpointSaved) on the subjects that name
//     it, and its poison
//     subject;
//   - what its jobs write (events.NodeLogSubjects);
//   - its lease, in the nodes' bucket (events.NodeLeasesBucket): nothing
//     else of any bucket, and no rollup anyone could take (the bucket
//     refuses them); and reading it back where RENT sees it;
//   - reading the log (direct gets: a job's history, RUN's decisions);
//   - its two consumers (events.NodeConsumers), which the gate makes for it:
//     their info, pulls and acks. It may make, change or delete no
//     consumer, nor create, change or purge any stream;
//   - the images the operator allows (direct gets on the limits' bucket);
//   - the node gate (pkg/gate): its consumers made, the data of the jobs
//     held on it, while they are.
func nodePermissions(g *grant, id Identity) {
	node := id.Name
	g.pub(subjectOf(events.TypeNodeAnnounced, node, "*"))
	g.pub(subjectOf(events.TypeDeviceWithdrawn, node, "*"), subjectOf(events.TypeDeviceRestored, node, "*"))
	g.pub(subjectOf(events.TypeRunStarted, "*", node), subjectOf(events.TypeRunStopped, "*", node))
	g.pub(subjectOf(events.TypeCheckpointSaved, "*", node))
	g.pub(events.PoisonSubject(RunService))
	g.pub(events.NodeLogSubjects(node))
	g.pub(streamInfo(events.KVStream(events.NodeLeasesBucket)), kvKey(events.NodeLeasesBucket, "node."+node))
	g.pub(events.LeaseGetSubject("node." + node))
	g.pub(streamInfo(events.Stream))
	g.pub(readMessages(events.Stream)...)
	for _, c := range events.NodeConsumers(node) {
		g.pub(jsAPI+"CONSUMER.INFO."+events.Stream+"."+c.Name(), jsAPI+"CONSUMER.MSG.NEXT."+events.Stream+"."+c.Name(),
			"$JS.ACK."+events.Stream+"."+c.Name()+".>", "$JS.ACK.*.*."+events.Stream+"."+c.Name()+".>")
	}
	g.pub(streamInfo(limits.Stream))
	g.pub(readMessages(limits.Stream)...)
	g.pub(events.GateSubjects(node))
}

// servicePermissions adds what the service of id needs.
func servicePermissions(g *grant, id Identity) {
	// Every service sets up (finds) the streams and buckets on start, reads
	// job histories from the log (React), and may move a message it can
	// never handle to the poison stream.
	for _, s := range systemStreams {
		if s != limits.Stream { // read by those that need the limits (kvRead)
			g.pub(streamInfo(s))
		}
	}
	g.pub(readMessages(events.Stream)...)
	g.pub(consume(events.Stream, true)...)
	g.pub(events.PoisonSubject(id.Service))
	for _, t := range owned[id.Service] {
		g.pub(subjectOf(t, "*", "*"))
	}
	switch id.Service {
	case SubmitService:
		// Checks that every staged input is present and intact (and makes
		// the bucket of a submitter who has none, as every service that
		// opens the stores does).
		g.dataBuckets()
		// Watches the limits and allowed images it decides by.
		g.pub(kvRead(limits.Bucket)...)
	case RentService:
		// The leader lease, and watching every lease: node leases say
		// which nodes live.
		g.pub(kvRead(events.LeasesBucket)...)
		g.pub(kvKey(events.LeasesBucket, "leader."+RentService))
		// The nodes' own leases, as their bucket's leader has them: what
		// decides a node lost where the leases bucket's copy lags.
		g.pub(readMessages(events.KVStream(events.NodeLeasesBucket))...)
		// Its checkpoint, read on start and written as it goes.
		g.pub(kvRead(events.RentBucket)...)
		g.pub(kvKey(events.RentBucket, events.RentCheckpointKey))
		g.serve(wire.RentWhySubject("*"))
	case OutputService:
		// Returned output, manifests, deletions and sweeps of every
		// submitter's bucket; its retention timers; what jobs keep, asked
		// per user on e31.api.<user>.output.stored.
		g.dataBuckets()
		// Purging is a submitter's bucket only: a bucket's stream is named
		// after its submitter, and a wildcard cannot say "OBJ_ streams",
		// so every stream of e31's own is denied by name. Without it,
		// OUTPUT's credentials would purge the log.
		g.pub(streamPurge("*"))
		for _, s := range systemStreams {
			g.deny(streamPurge(s))
		}
		g.pub(events.TimerAtSubjects)
		g.pub(streamInfo(events.TimerStream))
		g.pub(consume(events.TimerStream, true)...)
		g.serve(wire.OutputStoredService)
		// The node gate (pkg/gate): what nodes ask of the jobs held on
		// them, a read answered in several messages.
		g.serve(events.GateSubjects("*"))
		g.respondMany = true
		// What is published about jobs as it is stored, which tells the
		// gate when to look at the log again: what OUTPUT reads of the
		// log anyway.
		g.sub(events.JobSubjects)
		// Its checkpoint, read on start and written as it goes.
		g.pub(kvRead(events.OutputBucket)...)
		g.pub(kvKey(events.OutputBucket, events.OutputCheckpointKey))
	case LedgerService:
		// Its own bucket: records, their index and its checkpoint,
		// written in atomic batches and read back (direct gets, ordered
		// consumers). No other identity may read it: it holds every
		// tenant's records.
		g.pub(kvRead(events.LedgerBucket)...)
		g.pub("$KV." + events.LedgerBucket + ".>")
		for _, e := range wire.LedgerEndpoints {
			g.serve(wire.LedgerSubject("*", e))
		}
	}
}

// DataBucketSubjects is what a submitter may publish to use its own data
// bucket (events.DataBucketFor): put and get objects, and purge them, as
// the CLI does when it stages data and fetches output. Objects are read
// with direct gets (stage.WithPullReads), never through a consumer: a push
// consumer delivers on whatever subject its creator names, in the
// bucket's account (E31), and would store the submitter's bytes in a
// node's lease, the log or another tenant's bucket. It may not create the
// bucket: a user allowed to create a stream could make one that captures
// other users' subjects. The operator makes it (`e31 setup --submitter`,
// `e31 dev --users`), or a service when the submitter's first job needs
// it.
func DataBucketSubjects(user string) []string {
	bucket := events.DataBucketFor(user)
	s := objStream(bucket)
	out := []string{"$O." + bucket + ".>", streamInfo(s), streamPurge(s)}
	return append(out, readMessages(s)...)
}

// LimitsSubjects is what a submitter may publish to read its limits: a
// direct get of its own key in the limits bucket, and of the default key
// (limits for everyone, which say nothing of any other tenant). Nothing
// else of the bucket: no other submitter's key, no watch, no listing.
func LimitsSubjects(user string) []string {
	return []string{limits.DirectGetSubject(limits.Key(user)), limits.DirectGetSubject(limits.DefaultKey)}
}

// dataBuckets grants every submitter's bucket: the object store
// subjects, and the JetStream API on every stream (bucket streams are
// named after their submitter, OBJ_E31_DATA_<name>, and NATS wildcards
// match whole tokens only); missing buckets may be made. The wildcard
// would read the ledger's bucket too, every tenant's records, which only
// the LEDGER may: it is denied by name.
func (g *grant) dataBuckets() {
	g.pub("$O.>", streamInfo("*"), jsAPI+"STREAM.CREATE.*")
	g.pub(readMessages("*")...)
	g.pub(consume("*", true)...)
	// Few subjects, as a node's credentials are near the 4 KiB a CONNECT
	// may take: reading messages, and every consumer request.
	ledger := events.KVStream(events.LedgerBucket)
	g.deny(readMessages(ledger)...)
	g.deny(jsAPI+"CONSUMER.*."+ledger, jsAPI+"CONSUMER.*."+ledger+".>")
}

// jsAPI prefixes JetStream's API subjects.
const jsAPI = "$JS.API."

func streamInfo(stream string) string  { return jsAPI + "STREAM.INFO." + stream }
func streamPurge(stream string) string { return jsAPI + "STREAM.PURGE." + stream }

// systemStreams are e31's own streams, the buckets' included: every one
// but the submitters' data buckets (OBJ_E31_DATA_<name>).
var systemStreams = append(slices.Clone(events.Streams), limits.Stream)

func objStream(bucket string) string { return "OBJ_" + bucket }

// readMessages is getting single messages of a stream: direct gets (last
// by subject is the subject's tokens after the stream's), and the API get.
func readMessages(stream string) []string {
	return []string{jsAPI + "DIRECT.GET." + stream, jsAPI + "DIRECT.GET." + stream + ".>", jsAPI + "STREAM.MSG.GET." + stream}
}

// consume is creating consumers on a stream and reading from them: ordered
// consumers (pull, or push with flow control) and durable ones with their
// acks. The consumer's name is a token of these subjects, but an ordered
// consumer's is random, so they cannot be narrowed to one name. Acks and
// flow control come in JetStream's two formats: $JS.ACK.<stream>.… and
// $JS.ACK.<domain>.<account>.<stream>.….
func consume(stream string, deleteConsumers bool) []string {
	out := []string{
		jsAPI + "CONSUMER.CREATE." + stream,
		jsAPI + "CONSUMER.CREATE." + stream + ".>",
		jsAPI + "CONSUMER.INFO." + stream + ".*",
		jsAPI + "CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.ACK." + stream + ".>",
		"$JS.ACK.*.*." + stream + ".>",
		"$JS.FC." + stream + ".>",
		"$JS.FC.*.*." + stream + ".>",
	}
	if deleteConsumers {
		out = append(out, jsAPI+"CONSUMER.DELETE."+stream+".*")
	}
	return out
}

// kvRead is reading and watching a KV bucket.
func kvRead(bucket string) []string {
	s := events.KVStream(bucket)
	return append(append([]string{streamInfo(s)}, readMessages(s)...), consume(s, true)...)
}

// kvKey is writing (and deleting) one key of a KV bucket.
func kvKey(bucket, key string) string { return "$KV." + bucket + "." + key }

// Tokens stand in for a job or node id and for an identity or node: valid
// ids that no real subject uses, replaced after events.SubjectOf.
const (
	idMark   = "E31-AUTH-ID"
	tailMark = "E31-AUTH-TAIL"
)

// samples is one event of each type, with tailMark wherever the type's
// subject carries an identity or a node, so that events.SubjectOf (the one
// place that says where an event is stored) gives each type's subject.
var samples = map[string]events.Event{
	events.TypeJobRequested:    &events.JobRequested{Submitter: tailMark},
	events.TypeJobSubmitted:    &events.JobSubmitted{},
	events.TypeJobRejected:     &events.JobRejected{},
	events.TypeComputeHeld:     &events.ComputeHeld{Hold: events.Hold{Node: tailMark}},
	events.TypeRunStarted:      &events.RunStarted{Hold: events.Hold{Node: tailMark}},
	events.TypeRunStopped:      &events.RunStopped{Hold: events.Hold{Node: tailMark}},
	events.TypeCheckpointSaved: &events.CheckpointSaved{Hold: events.Hold{Node: tailMark}},
	events.TypeOutputReturned:  &events.OutputReturned{},
	events.TypeComputeReleased: &events.ComputeReleased{},
	events.TypeCancelRequested: &events.CancelRequested{By: tailMark},
	events.TypeJobCancelled:    &events.JobCancelled{},
	events.TypeNodeAnnounced:   &events.NodeAnnounced{Node: idMark},
	events.TypeNodeExpired:     &events.NodeExpired{Node: idMark},
	events.TypeDeviceWithdrawn: &events.DeviceWithdrawn{Node: idMark},
	events.TypeDeviceRestored:  &events.DeviceRestored{Node: idMark},
	events.TypeHoldLost:        &events.HoldLost{},
	events.TypeHoldExpired:     &events.HoldExpired{},
	events.TypeDeleteRequested: &events.DeleteRequested{What: events.WhatData, By: tailMark},
	events.TypeDeleted:         &events.Deleted{What: events.WhatData},
}

// subjectOf is the subject events of ceType are stored on, with id for the
// job or node token and tail for the identity or node token of the types
// that have one; either may be a wildcard.
func subjectOf(ceType, id, tail string) string {
	ev, ok := samples[ceType]
	if !ok {
		panic(fmt.Sprintf("auth: no sample of event type %q", ceType))
	}
	s, err := events.SubjectOf(idMark, ev)
	if err != nil {
		panic(fmt.Sprintf("auth: subject of %s: %v", ceType, err))
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		switch t {
		case idMark:
			tokens[i] = id
		case tailMark:
			tokens[i] = tail
		}
	}
	return strings.Join(tokens, ".")
}

// grant collects permissions.
type grant struct {
	pubs, subs []string
	// denied are subjects refused to publish on although an allowed
	// wildcard matches them: NATS applies a deny over any allow.
	denied  []string
	respond bool
	// respondMany lets every reply be answered with several messages
	// (within responseTTL): a streamed answer.
	respondMany bool
}

func (g *grant) pub(s ...string)  { g.pubs = append(g.pubs, s...) }
func (g *grant) deny(s ...string) { g.denied = append(g.denied, s...) }
func (g *grant) sub(s ...string)  { g.subs = append(g.subs, s...) }

// serve is answering requests on subjects, as a micro service: the
// endpoints and the micro discovery subjects, with the right to publish
// each reply once.
func (g *grant) serve(subjects ...string) {
	g.sub(subjects...)
	g.sub("$SRV.>")
	g.respond = true
}

func (g *grant) permissions() jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(minimal(g.pubs)...)
	p.Pub.Deny.Add(minimal(g.denied)...)
	p.Sub.Allow.Add(minimal(g.subs)...)
	if g.respond {
		p.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: responseTTL}
		if g.respondMany {
			p.Resp.MaxMsgs = -1
		}
	}
	return p
}

// minimal is subjects without those another of them covers, in their
// order: the same permission, in fewer bytes. A user's JWT travels in its
// CONNECT, which a server takes up to 4 KiB of (max_control_line), and a
// service that reaches every submitter's bucket through wildcards (see
// dataBuckets) would otherwise list the log's subjects twice.
func minimal(subjects []string) []string {
	out := make([]string, 0, len(subjects))
	for i, x := range subjects {
		covered := false
		for j, y := range subjects {
			// Of two equal subjects, the first stays.
			if i != j && covers(y, x) && (x != y || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, x)
		}
	}
	return out
}

// covers reports whether every subject that pattern x matches, pattern y
// matches too: token by token, "*" covers any one token but ">" (which
// stands for one or more), and ">" covers the rest, one token or more.
func covers(y, x string) bool {
	yt, xt := strings.Split(y, "."), strings.Split(x, ".")
	for i, t := range yt {
		if t == ">" {
			return len(xt) > i
		}
		if i >= len(xt) {
			return false
		}
		switch {
		case xt[i] == ">":
			return false
		case t == "*", t == xt[i]:
		default:
			return false
		}
	}
	return len(xt) == len(yt)
}
