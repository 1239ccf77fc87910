package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/retry"
)

// The one place that says where things are stored.
const (
	// Stream is the log of every job and node event: the source of truth.
	Stream = "E31"
	// PoisonStream keeps events a service could never handle, with the reason,
	// so that nothing is dropped silently.
	PoisonStream = "E31_POISON"
	// DataBucket names the object stores of staged data and returned output,
	// content addressed by digest: each submitter has its own,
	// DataBucketFor(submitter). The bucket of that name alone is for tests
	// and tools.
	DataBucket = "E31_DATA"

	// LeasesBucket is the KV bucket of leases: node.<name> for each live run
	// node and leader.<service> for the one instance that decides. Its
	// expiry markers (what RENT watches to see a lease lapse) need the
	// stream to take rollups, which the server then forces on: so no run
	// node writes it; each writes its lease in NodeLeasesBucket, which this
	// bucket sources.
	LeasesBucket = "E31_LEASES"
	// NodeLeasesBucket is where run nodes write their leases
	// (node.<name>): a KV bucket without expiry markers that refuses
	// rollups and purges, so that no node can roll up or purge the leases
	// of the others (a write to its own key with "Nats-Rollup: all" would,
	// in LeasesBucket, purge every lease, the leader's included, and every
	// node would fence itself). LeasesBucket sources it, key for key. Its
	// lease time is three quarters of LeasesBucket's: a lease lapses here,
	// where the node renews it, before it lapses there, where RENT sees it.
	NodeLeasesBucket = "E31_NODE_LEASES"
	// LedgerBucket is the LEDGER's own store, a KV bucket: the records of
	// jobs that are over (and of every job as of its last checkpoint), an
	// index of them in the order the log made them, and the checkpoint
	// that says which sequence of the log all of it is as of. It is made
	// from the log and can be made again from it. Only the LEDGER writes
	// it; the auditor reads the records and the checkpoint
	// (LedgerRecordPrefix, LedgerCheckpointKey) to compare them with those
	// it rebuilds, and nothing else reads it.
	LedgerBucket = "E31_LEDGER"
	// LedgerRecordPrefix prefixes the key of a job's entry in LedgerBucket
	// (rec.<job>): JSON whose "record" member is the job's hold record
	// (pkg/hold) as of the checkpoint, or as of a later one if the entry
	// was written since. The rest of the entry is the LEDGER's own.
	LedgerRecordPrefix = "rec."
	// LedgerCheckpointKey is the key of the LEDGER's checkpoint in
	// LedgerBucket: JSON whose "applied" member is the sequence of the log
	// every entry written with it or before is as of.
	LedgerCheckpointKey = "checkpoint"
	// RentBucket is RENT's own KV bucket: its checkpoint (RentCheckpointKey),
	// what lets a RENT that starts read the log from the oldest live job's
	// submission rather than from the beginning. It is made from the log;
	// without it RENT reads the whole log, as before it had one.
	RentBucket = "E31_RENT"
	// RentCheckpointKey is the key of RENT's checkpoint in RentBucket.
	RentCheckpointKey = "checkpoint"
	// OutputBucket is OUTPUT's own KV bucket: the checkpoint of its
	// retention (OutputCheckpointKey), what lets an OUTPUT that starts
	// read the log from the first event of the oldest job whose stored
	// data retention still keeps, rather than from the beginning. It is
	// made from the log; without it OUTPUT reads the whole log.
	OutputBucket = "E31_OUTPUT"
	// OutputCheckpointKey is the key of OUTPUT's checkpoint in
	// OutputBucket.
	OutputCheckpointKey = "checkpoint"

	// DefaultLeaseTTL is how long a lease lives without renewal: how long a
	// dead node or scheduler goes unnoticed.
	DefaultLeaseTTL = 10 * time.Second

	// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id. Past it,
	// idempotent handlers are what keep a redelivery from acting twice.
	DuplicateWindow = 2 * time.Minute
)

// ValidID reports whether id can name a job or node: one NATS subject
// token, ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$. It is checked for every event
// decoded, so by hand rather than with a regular expression, which cost a
// tenth of the audit's replay.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 64 || id[0] == '_' || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// StreamOptions are the deployment choices for the streams.
type StreamOptions struct {
	// Replicas is 1 on one machine and 3 in a cluster.
	Replicas int
	// LeaseTTL is the lease time of the leases bucket; default DefaultLeaseTTL.
	LeaseTTL time.Duration
	// LogMaxBytes bounds the log (the stream's MaxBytes); 0: bounded only by
	// the server's JetStream store. Either way, a full log refuses what
	// comes and drops nothing (see StreamConfig), and SUBMIT stops
	// accepting jobs LogReserve short of the bound (see LogNearlyFull).
	LogMaxBytes int64
	// Clustered says the server is one of a cluster, where a stream made
	// with one replica may be given three later (e31 setup): Setup reads
	// it from the connection. See leasePersist.
	Clustered bool
}

// LeasesBucketConfig is the configuration of the leases bucket. Its TTL is
// the lease time; markers make an expiry visible to watchers.
func LeasesBucketConfig(o StreamOptions) jetstream.KeyValueConfig {
	ttl := o.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	return jetstream.KeyValueConfig{
		Bucket:         LeasesBucket,
		Description:    "e31 leases: live run nodes and the deciding scheduler",
		History:        1,
		TTL:            ttl,
		LimitMarkerTTL: max(ttl, time.Second),
		Storage:        jetstream.FileStorage,
		Replicas:       max(o.Replicas, 1),
	}
}

// NodeLeasesStreamConfig is the stream behind NodeLeasesBucket: shaped as
// nats.go makes a KV bucket (so that a node opens it as one), with no
// expiry markers, refusing rollups and purges.
func NodeLeasesStreamConfig(o StreamOptions) jetstream.StreamConfig {
	ttl := NodeLeaseTTL(LeasesBucketConfig(o).TTL)
	return jetstream.StreamConfig{
		Name:              KVStream(NodeLeasesBucket),
		Description:       "e31 run nodes' leases, as each node writes its own: sourced into " + LeasesBucket,
		Subjects:          []string{"$KV." + NodeLeasesBucket + ".>"},
		MaxMsgsPerSubject: 1,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxMsgSize:        -1,
		MaxAge:            ttl,
		MaxConsumers:      -1,
		Storage:           jetstream.FileStorage,
		Replicas:          max(o.Replicas, 1),
		Discard:           jetstream.DiscardNew,
		Duplicates:        min(ttl, DuplicateWindow),
		AllowDirect:       true,
		AllowRollup:       false,
		DenyDelete:        true,
		DenyPurge:         true,
		PersistMode:       leasePersist(o),
	}
}

// LeasesStreamConfig is the stream behind LeasesBucket, as nats.go makes
// it of LeasesBucketConfig, sourcing NodeLeasesBucket, and written as
// leasePersist says: a KeyValueConfig has no persist mode, and a stream's
// cannot be changed once it is made.
func LeasesStreamConfig(o StreamOptions) jetstream.StreamConfig {
	kv := LeasesBucketConfig(o)
	return jetstream.StreamConfig{
		Name:                   KVStream(LeasesBucket),
		Description:            kv.Description,
		Subjects:               []string{"$KV." + LeasesBucket + ".>"},
		Sources:                []*jetstream.StreamSource{nodeLeasesSource()},
		MaxMsgsPerSubject:      int64(kv.History),
		MaxBytes:               -1,
		MaxAge:                 kv.TTL,
		MaxMsgSize:             -1,
		Storage:                kv.Storage,
		Replicas:               kv.Replicas,
		AllowRollup:            true,
		DenyDelete:             true,
		Duplicates:             min(kv.TTL, DuplicateWindow),
		MaxMsgs:                -1,
		MaxConsumers:           -1,
		AllowDirect:            true,
		Discard:                jetstream.DiscardNew,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: kv.LimitMarkerTTL,
		PersistMode:            leasePersist(o),
	}
}

// leasePersist is how a lease stream made with o is written. A
// lease is not history: it says a node or the deciding RENT lives, and its
// worth is that it is renewed, a pool of 10,000 nodes renewing 4,000 times
// a second. On one server each renewal written to disk before it is
// acknowledged would take most of the disk's synchronous writes, the log's
// among them (e31 bench scheduler --renew --sync always: 9,075 of 10,000
// nodes counted lost). So a single server acknowledges a renewal once it
// is written to its files, and the disk catches up on its own (JetStream's
// async persist mode, which it allows only without replicas; three
// replicas keep a renewal on a quorum instead, as they keep everything).
//
// What this risks is bounded by the fencing, not by the disk. A server
// killed loses only the writes not yet handed to the kernel; one whose
// machine loses power may come back with older leases. Either way a node
// whose renewal was lost finds its lease's revision changed at its next
// renewal and stops its jobs at once (pkg/lease), and a node that cannot
// reach the server stops them on its own clock, by the TTL less the fence
// margin after its last renewal: a server that lost power and restarted
// takes longer than that, and RENT, starting with it, gives a node with
// no lease a whole lease time before it counts it lost.
//
// A stream's persist mode cannot be changed once it is made, and a
// replicated stream cannot be written asynchronously: so a lease stream is
// made async only on a server that is not one of a cluster, where its
// replicas will never be raised. A deployment made before keeps writing
// its leases to disk until its lease streams are made again.
func leasePersist(o StreamOptions) jetstream.PersistModeType {
	if o.Replicas > 1 || o.Clustered {
		return jetstream.DefaultPersistMode
	}
	return jetstream.AsyncPersistMode
}

// clustered reports whether the server js is connected to is one of a
// cluster, as the server's INFO says.
func clustered(js jetstream.JetStream) bool { return js.Conn().ConnectedClusterName() != "" }

// LeaseGetSubject is where the lease under key of LeasesBucket is read
// with a direct get: a node reads its own there (its permissions allow it
// no other), to see that RENT can.
func LeaseGetSubject(key string) string {
	return "$JS.API.DIRECT.GET." + KVStream(LeasesBucket) + ".$KV." + LeasesBucket + "." + key
}

// NodeLeaseSubject is the subject node's lease is stored on in
// NodeLeasesBucket, where the node renews it.
func NodeLeaseSubject(node string) string { return "$KV." + NodeLeasesBucket + ".node." + node }

// NodeLeaseTTL is the lease time of NodeLeasesBucket for LeasesBucket's
// lease time: three quarters of it.
func NodeLeaseTTL(ttl time.Duration) time.Duration { return ttl * 3 / 4 }

// nodeLeasesSource is LeasesBucket's source of the nodes' leases, each key
// under its own name.
func nodeLeasesSource() *jetstream.StreamSource {
	return &jetstream.StreamSource{Name: KVStream(NodeLeasesBucket), SubjectTransforms: []jetstream.SubjectTransformConfig{
		{Source: "$KV." + NodeLeasesBucket + ".>", Destination: "$KV." + LeasesBucket + ".>"}}}
}

// LinkNodeLeases makes NodeLeasesBucket if it is missing, and makes
// LeasesBucket source it if it does not yet: for a deployment made before
// nodes wrote their leases apart (`e31 setup` and `e31 dev` call it, as
// the operator). It changes nothing else of either, and reports whether it
// changed anything.
func LinkNodeLeases(ctx context.Context, js jetstream.JetStream) (bool, error) {
	leases, err := js.Stream(ctx, KVStream(LeasesBucket))
	if err != nil {
		return false, fmt.Errorf("link the nodes' leases: %w", err)
	}
	cfg := leases.CachedInfo().Config
	changed := false
	if _, err := js.Stream(ctx, KVStream(NodeLeasesBucket)); errors.Is(err, jetstream.ErrStreamNotFound) {
		in := NodeLeasesStreamConfig(StreamOptions{Replicas: cfg.Replicas, LeaseTTL: cfg.MaxAge, Clustered: clustered(js)})
		if _, err := js.CreateStream(ctx, in); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return false, fmt.Errorf("link the nodes' leases: %w", err)
		}
		changed = true
	} else if err != nil {
		return false, fmt.Errorf("link the nodes' leases: %w", err)
	}
	for _, src := range cfg.Sources {
		if src.Name == KVStream(NodeLeasesBucket) {
			return changed, nil
		}
	}
	cfg.Sources = append(cfg.Sources, nodeLeasesSource())
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return changed, fmt.Errorf("link the nodes' leases: %w", err)
	}
	return true, nil
}

// KVStream is the stream behind the KV bucket named bucket, as nats.go
// names it.
func KVStream(bucket string) string { return "KV_" + bucket }

// Streams are the streams this package sets up or names, the buckets
// included (a KV bucket is a stream, KVStream): with the limits' bucket
// (pkg/limits), every stream of e31's own, all but the submitters' data
// buckets. Provisioning raises their replicas, and no service but their
// own may purge them.
var Streams = []string{
	Stream, PoisonStream, TimerStream,
	KVStream(LeasesBucket), KVStream(NodeLeasesBucket), KVStream(LedgerBucket), KVStream(RentBucket), KVStream(OutputBucket),
}

// RentBucketConfig is the configuration of RENT's bucket.
func RentBucketConfig(o StreamOptions) jetstream.KeyValueConfig {
	return checkpointBucketConfig(RentBucket, "e31 RENT: where a RENT that starts may begin to read the log", o)
}

// OutputBucketConfig is the configuration of OUTPUT's bucket.
func OutputBucketConfig(o StreamOptions) jetstream.KeyValueConfig {
	return checkpointBucketConfig(OutputBucket, "e31 OUTPUT: where an OUTPUT that starts may begin to read the log", o)
}

// checkpointBucketConfig is a service's bucket of checkpoints: one
// revision a key, on disk, replicated as the log is.
func checkpointBucketConfig(bucket, description string, o StreamOptions) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: description,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
	}
}

// LedgerBucketConfig is the configuration of the stream behind the
// ledger's bucket: a KV bucket with one revision a key (nats.go's own KV
// stream, as jetstream.KeyValueConfig{History: 1} makes it) that also
// takes atomic batches, so that the records and the checkpoint they are
// as of are stored together or not at all.
func LedgerBucketConfig(o StreamOptions) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:               KVStream(LedgerBucket),
		Description:        "e31 ledger: hold records of finished jobs and the checkpoint they are as of",
		Subjects:           []string{"$KV." + LedgerBucket + ".>"},
		Storage:            jetstream.FileStorage,
		Replicas:           max(o.Replicas, 1),
		MaxMsgsPerSubject:  1,
		MaxMsgs:            -1,
		MaxBytes:           -1,
		MaxConsumers:       -1,
		Discard:            jetstream.DiscardNew,
		AllowRollup:        true,
		DenyDelete:         true,
		AllowDirect:        true,
		Duplicates:         DuplicateWindow,
		AllowAtomicPublish: true,
	}
}

// StreamConfig is the configuration of the event log.
//
// Full, the log refuses new events (DiscardNew) and never drops old ones:
// an event is a fact, and the oldest are the submissions of jobs that may
// still be running. The bound is o.LogMaxBytes, or without one the server's
// store (max_file_store, or the disk), which refuses the same way.
func StreamConfig(o StreamOptions) jetstream.StreamConfig {
	maxBytes := o.LogMaxBytes
	if maxBytes <= 0 {
		maxBytes = -1
	}
	return jetstream.StreamConfig{
		Name:        Stream,
		Description: "e31 job and node events: the source of truth",
		Subjects:    []string{JobSubjects, NodeSubjects},
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
		Retention:   jetstream.LimitsPolicy,
		// Hold records are kept for ever, so the log is too.
		MaxAge:      0,
		MaxMsgs:     -1,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardNew,
		MaxMsgSize:  MaxBodyBytes + 4096,
		Duplicates:  DuplicateWindow,
		AllowDirect: true,
		// An event is a fact: nobody may delete one.
		DenyDelete: true,
		DenyPurge:  true,
	}
}

// LogReserve is the part of a bounded log kept for the jobs already
// accepted: SUBMIT refuses new jobs once the log holds its MaxBytes less
// this, so that the events that take accepted jobs to their end (holds,
// starts, releases, outputs) still have room. An eighth of the bound, and
// at least 4 KiB (a few events) in a tiny one.
func LogReserve(maxBytes int64) int64 { return max(maxBytes/8, 4<<10) }

// LogNearlyFull tells whether a log holding bytes, bounded by maxBytes
// (<= 0: unbounded), has reached its reserve, and says so for a person.
func LogNearlyFull(bytes, maxBytes int64) (string, bool) {
	if maxBytes <= 0 || bytes < maxBytes-LogReserve(maxBytes) {
		return "", false
	}
	return fmt.Sprintf("the event log is nearly full (it holds %d of its %d bytes): new jobs are refused so that the jobs already accepted can finish; "+
		"the operator must give the log more room (e31 setup --log-max-bytes) before jobs are accepted again", bytes, maxBytes), true
}

// JetStream's error codes for a stream that refused a message for want of
// room: its own limits (DiscardNew), or the server's store.
const (
	jsStoreFailed           = 10077 // JSStreamStoreFailedF: "maximum bytes exceeded", ...
	jsInsufficientResources = 10023 // JSInsufficientResourcesErr: the server's store is full
	jsStorageResources      = 10047 // JSStorageResourcesExceededErr: the account's store is full
)

// ErrLogFull is wrapped by the errors e31 makes of a refusal for want of
// room in the log; IsLogFull recognizes it as well as JetStream's own.
var ErrLogFull = errors.New("the event log is full")

// IsLogFull reports whether a publish to the log was refused because the
// log, or the store under it, is full: nothing was stored, and nothing
// stored before was dropped.
func IsLogFull(err error) bool {
	if errors.Is(err, ErrLogFull) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch uint16(apiErr.ErrorCode) {
	case jsInsufficientResources, jsStorageResources:
		return true
	case jsStoreFailed:
		d := apiErr.Description
		return strings.Contains(d, "maximum bytes exceeded") || strings.Contains(d, "maximum messages exceeded")
	}
	return false
}

// PoisonStreamConfig is the configuration of the poison stream.
func PoisonStreamConfig(o StreamOptions) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        PoisonStream,
		Description: "e31 events a service could not handle, with the reason",
		Subjects:    []string{PoisonSubjects},
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
		MaxAge:      30 * 24 * time.Hour,
		// Anyone may publish junk that every service sets aside here: the
		// poison stream is bounded, and the oldest goes first. It is for
		// diagnosis; the log itself keeps every message.
		MaxBytes:   PoisonMaxBytes,
		Discard:    jetstream.DiscardOld,
		Duplicates: DuplicateWindow,
	}
}

// PoisonMaxBytes bounds the poison stream.
const PoisonMaxBytes = 256 << 20

// DataBucketFor is the object store of one submitter's staged data and
// returned output: kept apart from everyone else's, so that permissions can
// give each submitter its own and nothing more.
func DataBucketFor(submitter string) string { return DataBucket + "_" + submitter }

// DataBucketConfig is the configuration of an object store of data.
func DataBucketConfig(o StreamOptions) jetstream.ObjectStoreConfig {
	return jetstream.ObjectStoreConfig{
		Bucket:      DataBucket,
		Description: "e31 staged data and returned output, content addressed",
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
	}
}

// Setup creates the streams and buckets that do not exist yet. It is
// idempotent, so every service calls it on start and none depends on
// another having run. It never changes a stream that exists: an operator
// who made the log three-way replicated must not have a service that was
// started with the defaults make it single again.
func Setup(ctx context.Context, js jetstream.JetStream, o StreamOptions) error {
	o.Clustered = o.Clustered || clustered(js)
	for _, cfg := range []jetstream.StreamConfig{StreamConfig(o), PoisonStreamConfig(o), TimerStreamConfig(o), LedgerBucketConfig(o), NodeLeasesStreamConfig(o), LeasesStreamConfig(o)} {
		if _, err := js.Stream(ctx, cfg.Name); err == nil {
			continue
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("set up stream %s: %w", cfg.Name, err)
		}
		if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("set up stream %s: %w", cfg.Name, err)
		}
	}
	if _, err := OpenBucket(ctx, js, RentBucketConfig(o)); err != nil {
		return err
	}
	return nil
}

// OpenBucket finds the KV bucket cfg names, or makes it as cfg says if
// there is none. It never changes a bucket that exists (see Setup), and
// one made meanwhile by another is found.
//
// OUTPUT's bucket (OutputBucketConfig) is opened with it apart from
// Setup, which every service runs: only OUTPUT needs that bucket, and
// only OUTPUT (and the operator's setup) may make it, so a deployment
// from before it had one runs on until OUTPUT starts.
func OpenBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("set up bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// WaitReady retries a first JetStream call until the server answers: a fresh
// cluster has no meta leader yet when it starts accepting connections.
func WaitReady(ctx context.Context, js jetstream.JetStream) error {
	err := retry.Do(ctx, retry.Ready, func() error {
		// Each try has its own short deadline: a request sent while the
		// cluster forms can go unanswered, and waiting for it until ctx's
		// own deadline would spend every later chance on it.
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(tctx)
		return err
	}, retry.If(retry.Always))
	if err != nil {
		return fmt.Errorf("jetstream not ready: %w", err)
	}
	return nil
}
