package ledger

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"

	"github.com/e31net/e31/pkg/bus"
	"github.com/e31net/e31/pkg/chain"
	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/query/wire"
)

// The ledger's bucket (events.LedgerBucket) holds, under these keys:
//
//	rec.<job>          a job's entry: its record and what folding more events
//	                   into it needs (every job of the log as of the checkpoint)
//	made.<owner>.<job> the index of records in the order they were made, written
//	                   once, when the record is first stored, and never again:
//	                   the bucket's own order of these keys is the listing's
//	                   order ("_" for a job whose first message named no owner)
//	open.<shard>       the open jobs, by a hash of their id: what a restart loads
//	checkpoint         the sequence of the log all of it is as of, with the hash
//	                   chain, the counts and the running sums of the totals
//
// A flush writes them in one atomic batch, the checkpoint last: after a
// crash at any point the bucket holds either all of a flush or none of it,
// so the records always agree with the checkpoint, and the ledger starts
// again from the checkpoint's sequence and folds the rest of the log in as
// the first time.
//
// The auditor reads the bucket too (e31 audit): each entry's "record" and
// the checkpoint's "applied" (hold.Stored, hold.Checkpoint), which are
// therefore not the ledger's alone to rename; the rest is.
//
// Several instances share the bucket, each folding the log on its own, at
// its own pace. Each builds on one checkpoint, its base: the one it
// started from or last wrote. Every key of the bucket whose revision is
// at most the base holds what it held as of that checkpoint, and every job
// the instance changed since is in its memory: together, its records as of
// where it has read. A flush is written only over the instance's own
// base: its checkpoint carries Nats-Expected-Last-Subject-Sequence, so
// that if another instance wrote a flush since, the server refuses the
// whole batch. Likewise a key read with a revision past the base was
// written by another instance as of a point the reader is not at. Either
// way the instance has lost the race (errConflict): it drops what it has
// in memory and starts again from the newer checkpoint. Without this, an
// instance behind another wrote records as of a point older than the
// checkpoint beside them, or folded events into records that already held
// them.
const (
	keyRecord     = events.LedgerRecordPrefix
	keyMade       = "made."
	keyOpen       = "open."
	keyCheckpoint = events.LedgerCheckpointKey
	// noOwner stands for the owner of a job whose first message named none
	// in made keys: identities never start with "_" (events.ValidID).
	noOwner = "_"
	// openShards is how many keys the open jobs are listed under: enough
	// that a flush rewrites little of the list, few enough that a restart
	// reads it at once. 100,000 open jobs make 60 KiB a key.
	openShards = 64
	// maxBatch is the most messages JetStream takes in one atomic batch.
	maxBatch = 1000
	// flushAt is how many jobs may change before a flush, so that a flush
	// (their entries, their made keys, the open shards and the checkpoint)
	// fits in one atomic batch.
	flushAt = (maxBatch - openShards - 1) / 2
)

// checkpoint is what the projection derived from the log beyond its
// entries, as of Applied.
type checkpoint struct {
	Applied uint64                  `json:"applied"`
	Chain   chain.Head              `json:"chain"`
	Read    uint64                  `json:"read"`
	Skipped uint64                  `json:"skipped"`
	Gaps    uint64                  `json:"gaps"`
	Records int                     `json:"records"`
	Closed  map[string]*wire.Totals `json:"closed"`
}

// errConflict is a bucket another instance of the ledger wrote past this
// one's base: the instance must start again from the bucket's checkpoint.
var errConflict = errors.New("another instance of the ledger wrote a newer checkpoint: starting again from it")

// isConflict reports whether err means the instance must start again from
// the bucket's checkpoint.
func isConflict(err error) bool { return errors.Is(err, errConflict) }

// shardOf is the key of the open-jobs list a job is under.
func shardOf(job string) int {
	h := fnv.New32a()
	h.Write([]byte(job))
	return int(h.Sum32() % openShards)
}

// store is the ledger's bucket.
type store struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	prefix string // of the bucket's subjects
	// ctx bounds what the store does: its calls come from the fold and
	// from queries, which carry no context of their own down here.
	ctx     context.Context
	timeout time.Duration
	// base is the revision of the checkpoint the instance builds on (0:
	// none); set while the fold holds the lock, read by the prefetch
	// without it.
	base atomic.Uint64
	// stale is set once a read found the bucket written past base: the
	// instance must start again from the newer checkpoint, even if it
	// has nothing to write that would find out.
	stale atomic.Bool
}

// openStore opens the ledger's bucket, made by events.Setup.
func openStore(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (*store, error) {
	st, err := js.Stream(ctx, events.LedgerBucketConfig(events.StreamOptions{}).Name)
	if err != nil {
		return nil, fmt.Errorf("open the ledger's bucket %s: %w", events.LedgerBucket, err)
	}
	if !st.CachedInfo().Config.AllowAtomicPublish {
		return nil, fmt.Errorf("the ledger's bucket %s does not take atomic batches: it was made by something other than e31 setup", events.LedgerBucket)
	}
	return &store{nc: nc, js: js, stream: st, prefix: "$KV." + events.LedgerBucket + ".", ctx: ctx, timeout: 10 * time.Second}, nil
}

func (s *store) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.timeout)
}

// get reads a key as of the base: errConflict if another instance wrote
// it since (the value as of the base is gone: the bucket keeps one).
func (s *store) get(ctx context.Context, key string) (*jetstream.RawStreamMsg, error) {
	kve, err := s.last(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := s.pastBase(key, kve.Sequence); err != nil {
		return nil, err
	}
	return kve, nil
}

// pastBase is errConflict, and marks the store stale, if key's revision
// rev is past the base: another instance wrote it since.
func (s *store) pastBase(key string, rev uint64) error {
	if base := s.base.Load(); rev > base {
		s.stale.Store(true)
		return fmt.Errorf("%s is at revision %d, past the checkpoint this instance builds on (%d): %w", key, rev, base, errConflict)
	}
	return nil
}

// deletion reports whether m, a key's last message, deleted the key.
func deletion(m *jetstream.RawStreamMsg) bool {
	op := m.Header.Get("KV-Operation")
	return op == "DEL" || op == "PURGE"
}

// last reads a key as the bucket's stream leader has it (its value the
// message's data, its revision the message's sequence), not with the KV
// API's direct get, which any replica answers: one that lags answers with
// the key as it was, or without it, and the ledger would start from an
// older checkpoint than the one it then finds it conflicts with, leave out
// open jobs the newer one lists, or fold a job's events onto a new record
// when the bucket has one (a submitter was told "no such job" of the job
// it had just submitted while a server of the cluster caught up).
// jetstream.ErrKeyNotFound if the key has no value, or was deleted.
func (s *store) last(ctx context.Context, key string) (*jetstream.RawStreamMsg, error) {
	m, err := bus.LeaderLast(ctx, s.js, s.stream.CachedInfo().Config.Name, s.prefix+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, err
	}
	if deletion(m) {
		return nil, jetstream.ErrKeyNotFound
	}
	return m, nil
}

// load reads a job's entry; nil if the bucket has none.
func (s *store) load(job string) (*entry, error) {
	ctx, cancel := s.call()
	defer cancel()
	kve, err := s.get(ctx, keyRecord+job)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the entry of %s: %w", job, err)
	}
	return decodeEntry(job, kve.Data)
}

// loadMany reads the entries of jobs at once: in batches of one request
// each (readBatch), and those a batch could not settle one by one from the
// leader, a few requests in flight. The jobs not in memory in a batch of
// the log are looked up together. Jobs the bucket does not have map to
// nil. With strict, a checkpoint written past the base is errConflict
// even if none of jobs changed since (see readBatch). Entries read in
// batches are decoded with decode; those read one by one, whole.
func (s *store) loadMany(jobs []string, strict bool, decode func(job string, data []byte) (*entry, error)) (map[string]*entry, error) {
	out := make(map[string]*entry, len(jobs))
	var rest []string
	for batch := range slices.Chunk(jobs, readAtOnce) {
		left, err := s.readBatch(batch, out, strict, decode)
		if err != nil {
			return nil, err
		}
		rest = append(rest, left...)
	}
	var (
		mu sync.Mutex
		g  errgroup.Group
	)
	g.SetLimit(8)
	for _, job := range rest {
		g.Go(func() error {
			e, err := s.load(job)
			mu.Lock()
			out[job] = e
			mu.Unlock()
			return err
		})
	}
	return out, g.Wait()
}

// readAtOnce is how many entries one request reads: the checkpoint is
// read with them.
const readAtOnce = bus.MaxLastOf - 1

// readBatch reads the entries of jobs with one request (a direct get of
// the last message of each of their keys), putting those it settles in
// out, and returns the jobs it could not settle, to be read from the
// leader. One read for every job was most of a rebuild's reading: about
// 55 µs of CPU a job, the server's answer included (bus.LastOf).
//
// Any replica answers a direct get, and one that lags answers with the
// bucket as it was (see last). So the checkpoint is read in the same
// request, from the same state of the bucket, and witnesses it: at the
// base, the answer holds every key as of the base (a key written since
// has a revision past it, errConflict as in get); past the base, another
// instance has written a flush (errConflict); before it, or missing while
// there is a base, the replica lags, and the jobs are read from the leader.
// An answer cut short (the server stops at its most bytes) leaves the
// jobs it did not reach to the leader too.
//
// Past the base, only strict makes the checkpoint itself errConflict: the
// fold, whose next flush would be refused anyway, starts again at once. A
// query is answered as of the base: a newer checkpoint shows that the
// replica does not lag, and each job's key is errConflict only if another
// instance wrote that key since. Were every read a conflict once another
// instance had flushed, a listing of many pages (e31 audit's) would
// rarely reach its end with two instances running.
func (s *store) readBatch(jobs []string, out map[string]*entry, strict bool, decode func(job string, data []byte) (*entry, error)) (rest []string, err error) {
	base := s.base.Load()
	subjects := make([]string, 0, len(jobs)+1)
	for _, job := range jobs {
		subjects = append(subjects, s.prefix+keyRecord+job)
	}
	subjects = append(subjects, s.prefix+keyCheckpoint)
	ctx, cancel := s.call()
	defer cancel()
	msgs, whole, err := bus.LastOf(ctx, s.js, s.stream.CachedInfo().Config.Name, subjects)
	if err != nil {
		return nil, fmt.Errorf("read the entries of %d jobs: %w", len(jobs), err)
	}
	var witness uint64
	found := map[string]*jetstream.RawStreamMsg{}
	for _, m := range msgs {
		if m.Subject == s.prefix+keyCheckpoint {
			witness = m.Sequence
			continue
		}
		found[strings.TrimPrefix(m.Subject, s.prefix+keyRecord)] = m
	}
	if strict {
		if err := s.pastBase(keyCheckpoint, witness); err != nil {
			return nil, err
		}
	}
	if witness < base {
		return jobs, nil // a replica behind the base: the leader reads them all
	}
	for _, job := range jobs {
		m := found[job]
		switch {
		case m == nil && whole:
			out[job] = nil // the bucket has none
			continue
		case m == nil:
			rest = append(rest, job) // not reached by an answer cut short
			continue
		}
		if err := s.pastBase(keyRecord+job, m.Sequence); err != nil {
			return nil, err
		}
		if deletion(m) {
			out[job] = nil
			continue
		}
		e, err := decode(job, m.Data)
		if err != nil {
			return nil, err
		}
		out[job] = e
	}
	return rest, nil
}

// decodeEntry and encodeEntry use goccy/go-json, which reads and writes
// what encoding/json does (TestEntryCodecIsEncodingJSONs) at about half the
// CPU: a rebuild from the log encodes every job's entry at least once and
// decodes those it looks up again, most of its own work.
func decodeEntry(job string, data []byte) (*entry, error) {
	var e entry
	if err := gojson.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("the stored entry of %s: %w", job, err)
	}
	if len(e.Digest) > 0 {
		e.digest = sha256.New()
		if err := e.digest.(encoding.BinaryUnmarshaler).UnmarshalBinary(e.Digest); err != nil {
			return nil, fmt.Errorf("the stored digest of %s: %w", job, err)
		}
		e.Digest = nil
	}
	return &e, nil
}

// decodeListed reads a stored entry for a listing of every record: its
// record is left as stored, in raw (and Record nil), and the rest of the
// entry (the fold's state) is not decoded. Decoding a record and encoding
// it again for the answer was most of what serving such a listing cost
// the ledger (13 and 7 µs a record of 2 KiB), where finding its bytes
// costs 5.
func decodeListed(job string, data []byte) (*entry, error) {
	var l struct {
		Record gojson.RawMessage `json:"record,omitempty"`
	}
	if err := gojson.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("the stored entry of %s: %w", job, err)
	}
	return &entry{Job: job, raw: l.Record}, nil
}

func encodeEntry(e *entry) ([]byte, error) {
	if e.digest != nil {
		state, err := e.digest.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			return nil, err
		}
		e.Digest = state
		defer func() { e.Digest = nil }()
	}
	return gojson.Marshal(e)
}

// madeKey is the index key of e's record.
func madeKey(e *entry) string {
	owner := e.Owner
	if owner == "" {
		owner = noOwner
	}
	return keyMade + owner + "." + e.Job
}

// each calls fn with the jobs of the index after the one of key after (from
// the first if after is "" or not in the index), in order, up to chunk at a
// time, until fn says stop. With owner, only owner's and those whose first
// message named none.
//
// The index is read one key a request (bus.Stepper), each from where the
// last was: a consumer, or a batch, would have the server count every
// index key after the start first, the whole index again for every page
// of a listing (9 of the 40 seconds of `e31 audit` over 118,000 jobs went
// to it), where one key at a time costs what lies between two keys of the
// index. An index key is written once and never changed, so a replica
// that lags can only have fewer of them, at the end, and the Stepper asks
// the leader there.
func (s *store) each(owner, after string, chunk int, fn func(jobs []string) (bool, error)) error {
	from := uint64(1)
	if after != "" {
		ctx, cancel := s.call()
		m, err := s.stream.GetLastMsgForSubject(ctx, s.prefix+after)
		cancel()
		switch {
		case err == nil:
			from = m.Sequence + 1
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("find %s in the index: %w", after, err)
		}
	}
	filters := []string{s.prefix + keyMade + ">"}
	if owner != "" {
		filters = []string{s.prefix + keyMade + owner + ".*", s.prefix + keyMade + noOwner + ".*"}
	}
	// Each filter is read on its own; the index's order is the merge of
	// the two by sequence. next[i] is filter i's next key (nil once read),
	// done[i] says it has none left.
	step, err := bus.NewStepper(s.ctx, s.js, s.stream.CachedInfo().Config.Name)
	if err != nil {
		return fmt.Errorf("read the index: %w", err)
	}
	defer step.Close()
	next := make([]*jetstream.RawStreamMsg, len(filters))
	done := make([]bool, len(filters))
	base := s.base.Load()
	jobs := make([]string, 0, chunk)
	for {
		first := -1
		for i, f := range filters {
			if next[i] == nil && !done[i] {
				m, err := step.Next(f, from)
				switch {
				case errors.Is(err, jetstream.ErrMsgNotFound):
					done[i] = true
				case err != nil:
					return fmt.Errorf("read the index: %w", err)
				default:
					next[i] = m
				}
			}
			if next[i] != nil && (first < 0 || next[i].Sequence < next[first].Sequence) {
				first = i
			}
		}
		// Made by another instance past the base: the records this
		// instance made since are its fresh ones, in memory.
		if first < 0 || next[first].Sequence > base {
			if len(jobs) == 0 {
				return nil
			}
			_, err := fn(jobs)
			return err
		}
		m := next[first]
		next[first], from = nil, m.Sequence+1
		jobs = append(jobs, m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
		if len(jobs) == chunk {
			more, err := fn(jobs)
			if err != nil || !more {
				return err
			}
			jobs = jobs[:0]
		}
	}
}

// loadCheckpoint reads the checkpoint, which becomes the base; nil if
// there is none yet (the base is then 0).
func (s *store) loadCheckpoint() (*checkpoint, error) {
	ctx, cancel := s.call()
	defer cancel()
	s.stale.Store(false)
	kve, err := s.last(ctx, keyCheckpoint)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		s.base.Store(0)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the checkpoint: %w", err)
	}
	s.base.Store(kve.Sequence)
	var c checkpoint
	if err := json.Unmarshal(kve.Data, &c); err != nil {
		return nil, fmt.Errorf("read the checkpoint: %w", err)
	}
	return &c, nil
}

// openJobs lists the jobs that were open at the checkpoint.
func (s *store) openJobs() ([]string, error) {
	ctx, cancel := s.call()
	defer cancel()
	var jobs []string
	for shard := range openShards {
		kve, err := s.get(ctx, keyOpen+strconv.Itoa(shard))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the open jobs: %w", err)
		}
		if len(kve.Data) > 0 {
			jobs = append(jobs, strings.Split(string(kve.Data), "\n")...)
		}
	}
	return jobs, nil
}

// flush is what one flush writes.
type flush struct {
	made    []*entry         // records made since the last flush, in order
	changed []*entry         // every entry changed since the last flush
	open    map[int][]string // the open jobs of each shard whose list changed
	ckpt    checkpoint
}

// save writes f in one atomic batch, the checkpoint last, over the base:
// errConflict if another instance wrote a checkpoint since. The
// checkpoint written becomes the base.
func (s *store) save(f *flush) error {
	msgs, err := s.messages(f)
	if err != nil {
		return err
	}
	msgs[len(msgs)-1].Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(s.base.Load(), 10))
	ctx, cancel := s.call()
	defer cancel()
	seq, err := publishAtomic(ctx, s.nc, msgs, true)
	if err != nil {
		return err
	}
	s.base.Store(seq)
	return nil
}

// messages are the writes of f, the checkpoint last.
func (s *store) messages(f *flush) ([]*nats.Msg, error) {
	msgs := make([]*nats.Msg, 0, len(f.made)+len(f.changed)+len(f.open)+1)
	add := func(key string, data []byte) {
		msgs = append(msgs, &nats.Msg{Subject: s.prefix + key, Data: data, Header: nats.Header{}})
	}
	for _, e := range f.made {
		add(madeKey(e), []byte{'1'})
	}
	for _, e := range f.changed {
		data, err := encodeEntry(e)
		if err != nil {
			return nil, fmt.Errorf("encode the entry of %s: %w", e.Job, err)
		}
		add(keyRecord+e.Job, data)
	}
	for shard, jobs := range f.open {
		add(keyOpen+strconv.Itoa(shard), []byte(strings.Join(jobs, "\n")))
	}
	ckpt, err := json.Marshal(f.ckpt)
	if err != nil {
		return nil, err
	}
	add(keyCheckpoint, ckpt)
	if len(msgs) > maxBatch {
		return nil, fmt.Errorf("ledger: a flush of %d writes is more than one atomic batch takes (%d)", len(msgs), maxBatch)
	}
	return msgs, nil
}

// The server's codes for a message refused for its
// Nats-Expected-Last-Subject-Sequence: the subject is at another sequence
// (JSStreamWrongLastSequenceErrF), or being written by a batch in flight
// (JSStreamWrongLastSequenceConstantErr, in a cluster).
const (
	errWrongLastSequence         = 10071
	errWrongLastSequenceInFlight = 10164
)

// publishAtomic publishes msgs as one atomic batch (JetStream's
// Nats-Batch-Id): the stream stores all of them, in order, or none. Only
// the last, the commit, is acknowledged, with its sequence, which it
// returns; a message refused before it makes the commit fail, and one
// refused for the sequence it expects is errConflict. Without commit it
// stops before the last message, as a crash would: for tests.
func publishAtomic(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg, commit bool) (uint64, error) {
	id := nuid.Next()
	for i, m := range msgs {
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i == len(msgs)-1 && !commit {
			return 0, nc.Flush()
		}
		if i < len(msgs)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return 0, fmt.Errorf("write the ledger's bucket: %w", err)
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		reply, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return 0, fmt.Errorf("write the ledger's bucket: commit a batch of %d: %w", len(msgs), err)
		}
		var ack struct {
			Error *struct {
				Code        int    `json:"code"`
				ErrCode     int    `json:"err_code"`
				Description string `json:"description"`
			} `json:"error"`
			Seq   uint64 `json:"seq"`
			Count int    `json:"count"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return 0, fmt.Errorf("write the ledger's bucket: the commit's answer: %w", err)
		}
		if ack.Error != nil && (ack.Error.ErrCode == errWrongLastSequence || ack.Error.ErrCode == errWrongLastSequenceInFlight) {
			return 0, fmt.Errorf("write the ledger's bucket: %s: %w", ack.Error.Description, errConflict)
		}
		if ack.Error != nil {
			return 0, fmt.Errorf("write the ledger's bucket: a batch of %d refused: %s (%d)", len(msgs), ack.Error.Description, ack.Error.ErrCode)
		}
		return ack.Seq, nil
	}
	return 0, nil
}

// checkpointOf is the projection's checkpoint.
func (p *Projection) checkpointOf() checkpoint {
	closed := make(map[string]*wire.Totals, len(p.closed))
	for k, v := range p.closed {
		t := *v
		closed[k] = &t
	}
	return checkpoint{Applied: p.applied, Chain: p.chain.head(), Read: p.read, Skipped: p.skipped, Gaps: p.gaps,
		Records: p.records, Closed: closed}
}

// openProjection makes the projection of what st holds: as of its
// checkpoint, with the jobs then open in memory.
func openProjection(st *store) (*Projection, error) {
	p := NewProjection()
	p.store = st
	c, err := st.loadCheckpoint()
	if err != nil || c == nil {
		return p, err
	}
	p.applied, p.read, p.skipped, p.gaps, p.records = c.Applied, c.Read, c.Skipped, c.Gaps, c.Records
	p.flushed = c.Applied
	if c.Closed != nil {
		p.closed = c.Closed
	}
	if c.Chain.Seq > 0 {
		h, err := hex.DecodeString(c.Chain.Hash)
		if err != nil || len(h) != 32 {
			return nil, fmt.Errorf("the checkpoint's chain head %q: not a SHA-256", c.Chain.Hash)
		}
		p.chain.seq = c.Chain.Seq
		copy(p.chain.hash[:], h)
	}
	jobs, err := st.openJobs()
	if err != nil {
		return nil, err
	}
	loaded, err := st.loadMany(jobs, true, decodeEntry)
	if err != nil {
		return nil, err
	}
	for _, job := range jobs {
		e, remade, err := p.asOfCheckpoint(job, loaded[job])
		if err != nil {
			return nil, err
		}
		if e != nil {
			p.jobs[job] = e
		}
		// A job with no message up to the checkpoint was not open there:
		// nothing of it is loaded, and the fold makes its entry (and
		// reports it) when it meets the job's first message.
		if remade && e != nil {
			p.madeAgain = append(p.madeAgain, job)
		}
	}
	return p, nil
}

// Changed is how many jobs changed since the last flush.
func (p *Projection) changed() int { return len(p.dirty) + len(p.fresh) }

// Flush writes every job changed since the last flush to the store, with
// the checkpoint, and forgets those that are not open. Nothing without a
// store. After an error nothing is forgotten: the next flush writes it all.
func (p *Projection) Flush() error {
	if p.store == nil {
		return nil
	}
	if p.store.stale.Load() {
		// A read found the bucket written by another instance: even with
		// nothing to write, this instance must start again from there.
		return fmt.Errorf("write the ledger's bucket: %w", errConflict)
	}
	if len(p.dirty) == 0 && p.flushed == p.applied {
		return nil
	}
	if err := p.store.save(p.flushOf()); err != nil {
		return err
	}
	p.forget()
	return nil
}

// flushOf is what a flush writes now.
func (p *Projection) flushOf() *flush {
	f := &flush{ckpt: p.checkpointOf(), open: map[int][]string{}}
	for _, job := range p.fresh {
		if e := p.jobs[job]; e != nil && e.Record != nil {
			f.made = append(f.made, e)
		}
	}
	for _, e := range p.dirty {
		f.changed = append(f.changed, e)
	}
	if len(p.shards) > 0 {
		for shard := range p.shards {
			f.open[shard] = []string{}
		}
		for job, e := range p.jobs {
			if !e.open() {
				continue
			}
			if jobs, ok := f.open[shardOf(job)]; ok {
				f.open[shardOf(job)] = append(jobs, job)
			}
		}
	}
	return f
}

// forget is the end of a flush: what it wrote is the store's now.
func (p *Projection) forget() {
	for job, e := range p.dirty {
		if !e.open() {
			delete(p.jobs, job)
		}
	}
	p.dirty, p.shards, p.pos = map[string]*entry{}, map[int]bool{}, map[string]int{}
	p.fresh = nil
	p.flushed = p.applied
}
