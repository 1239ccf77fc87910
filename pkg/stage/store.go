package stage

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The errors of this package. Every error returned wraps one of them or an
// error from below (the file system, the store, the context).
var (
	// ErrNotFound is returned when an object the data needs is not in the store.
	ErrNotFound = errors.New("stage: object not found")
	// ErrCorrupt is returned when stored bytes do not match the size or digest
	// that named them: the object was tampered with, truncated or replaced.
	ErrCorrupt = errors.New("stage: object corrupt")
	// ErrChanged is returned when a local file changed between hashing and
	// uploading it, so the bytes sent no longer match the digest.
	ErrChanged = errors.New("stage: file changed while uploading")
	// ErrTimeout is returned when an object did not arrive in time: at the
	// store's minimum rate, or because its chunks are missing altogether.
	ErrTimeout = errors.New("stage: transfer timed out")
	// ErrUnsafePath is returned for a path that could lead outside the
	// directory it belongs to: absolute, with "..", or otherwise not local.
	ErrUnsafePath = errors.New("stage: unsafe path")
	// ErrBadManifest is returned for a folder manifest or part list that does
	// not parse or does not add up.
	ErrBadManifest = errors.New("stage: bad manifest")
	// ErrBadRef is returned for a DataRef that cannot name stored data.
	ErrBadRef = errors.New("stage: bad data reference")
	// ErrUnsupported is returned for local entries that cannot be staged: a
	// symlink to a folder, a device, a socket or pipe, a name that is not UTF-8.
	ErrUnsupported = errors.New("stage: unsupported file")
	// ErrOutputTooLarge is returned by Collect when the declared output is
	// larger than the job may return.
	ErrOutputTooLarge = errors.New("stage: output too large")
	// ErrFull means the store holds as much as it may (the submitter's
	// max-data): nothing was stored, and nothing stored before was lost.
	ErrFull = errors.New("stage: the store is full")
)

// Store is where content-addressed blobs live. JetStream's object store is
// the default ([NewObjectStore]); an S3-compatible one can be added later by
// implementing this and passing stagetest.TestStore, the contract every
// Store keeps (README.md, "Stores", says what it would take). A Store only moves and checks bytes: this package
// chooses the names (see the package documentation) and a Store must not
// interpret them beyond using them as keys.
//
// All methods may be called concurrently, from several processes too. Two
// Puts of one name at the same time must both succeed and leave one intact
// object; the JetStream store then keeps the chunks of the one that lost as
// unreferenced bytes, so this package never races with itself that way.
type Store interface {
	// Put stores the size bytes that r yields, whose sha256 is digest
	// ("sha256:<hex>"), under name, replacing any object of that name. It
	// stores all of them or nothing: if r fails, yields bytes that do not
	// match size and digest (ErrChanged), or ctx ends, Put returns an error and
	// name is left as it was. Put streams: it never holds the object in memory.
	Put(ctx context.Context, name, digest string, size int64, r io.Reader) error
	// Get streams the object stored under name, or fails with ErrNotFound. The
	// reader fails with an error wrapping ErrCorrupt, at the latest when it
	// reaches the end, if the bytes do not match the size and digest recorded
	// by Put. The caller closes it.
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	// Stat returns what Put recorded about name without reading the object,
	// or fails with ErrNotFound.
	Stat(ctx context.Context, name string) (Info, error)
	// Delete removes name. Deleting a missing object is not an error.
	Delete(ctx context.Context, name string) error
}

// Info is what a Store recorded about an object when it was put.
type Info struct {
	Size int64
	// Digest is "sha256:<hex>" of the stored bytes.
	Digest string
}

// ObjectStoreOption tunes the JetStream store.
type ObjectStoreOption func(*objectStore)

// WithGetTimeout bounds how long reading one object may take: slack plus the
// time the object needs at minRate bytes per second. NATS object store reads
// have a single deadline for the whole object and a stall (an object whose
// chunks were deleted never ends) is only noticed when it passes, so this is
// both the slowest link a transfer survives and the longest a broken object
// can hold a reader. The default is 30s plus 256 KiB/s: a 16 MiB part may take
// a minute and a half.
func WithGetTimeout(slack time.Duration, minRate int64) ObjectStoreOption {
	return func(o *objectStore) {
		o.slack = slack
		if minRate > 0 {
			o.minRate = minRate
		}
	}
}

// WithPullReads makes the store read objects with batched direct gets
// made through js, in place of nats.go's Get, which reads with a push
// consumer. A push consumer delivers in the account of the bucket's stream
// (E31), which a submitter's connection is not in: submitters live in the
// TENANTS account and reach the buckets through service imports (pkg/auth),
// so only answers come back to them, and a direct get's messages are
// answers. Nor may a submitter make consumers at all: a push consumer's
// deliver subject is any subject of E31, a lease or the log among them.
// Every Store that Tenants opens reads so.
func WithPullReads(js jetstream.JetStream) ObjectStoreOption {
	return func(o *objectStore) { o.js = js }
}

// NewObjectStore returns the Store kept in a JetStream object store bucket,
// normally events.DataBucket. Objects are stored in the bucket's default
// 128 KiB chunks, and reads are checked twice: nats.go compares the chunks
// with the SHA-256 it recorded on Put, and this package compares them with
// the digest the name derives from.
func NewObjectStore(os jetstream.ObjectStore, opts ...ObjectStoreOption) Store {
	o := &objectStore{os: os, slack: 30 * time.Second, minRate: 256 << 10}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

type objectStore struct {
	os      jetstream.ObjectStore
	js      jetstream.JetStream // with WithPullReads
	slack   time.Duration
	minRate int64
}

func (o *objectStore) Put(ctx context.Context, name, digest string, size int64, r io.Reader) error {
	want, err := digestBytes(digest)
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	// nats.go purges the chunks of an aborted Put only if its context is still
	// live, so cancellation reaches it as a read error instead, and the purge
	// cleans up after it.
	vr := &checkedReader{ctx: ctx, r: r, left: size, h: sha256.New(), want: want}
	info, err := o.os.Put(context.WithoutCancel(ctx), jetstream.ObjectMeta{Name: name}, vr)
	if isFull(err) {
		return fmt.Errorf("put %s: %w (%v)", name, ErrFull, err)
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	// The reader checked every byte before nats.go wrote the metadata; this
	// second look at what nats.go itself computed costs nothing.
	if got, err := natsDigest(info.Digest); err != nil || got != digest || int64(info.Size) != size {
		_ = o.os.Delete(context.WithoutCancel(ctx), name)
		return fmt.Errorf("put %s: stored %d bytes %s, want %d bytes %s: %w", name, info.Size, info.Digest, size, digest, ErrChanged)
	}
	return nil
}

// isFull reports whether the server refused a chunk because the bucket is
// at its MaxBytes. The server says so only in words: a store failure
// (JSStreamStoreFailedF, 10077) described as its ErrMaxBytes.
func isFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10077 && strings.Contains(apiErr.Description, "maximum bytes")
}

// checkedReader passes r through to nats.go, hashing it, and turns a
// mismatch with the promised size and digest, or a cancelled context, into a
// read error, so that nats.go aborts the Put before it writes the object's
// metadata: a bad upload never becomes visible under the name.
type checkedReader struct {
	ctx  context.Context
	r    io.Reader
	left int64
	h    hash.Hash
	want []byte
}

func (c *checkedReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	if c.left == 0 {
		// Everything promised has arrived: anything more is a change.
		var probe [1]byte
		n, err := c.r.Read(probe[:])
		if n > 0 {
			return 0, fmt.Errorf("more bytes than the %w", errSizeHashed)
		}
		if err != nil && err != io.EOF {
			return 0, err
		}
		if err == nil {
			return 0, nil
		}
		if got := c.h.Sum(nil); string(got) != string(c.want) {
			return 0, fmt.Errorf("%w: content is sha256:%x, hashed as sha256:%x", ErrChanged, got, c.want)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.left -= int64(n)
	if err == io.EOF {
		if c.left > 0 {
			return n, fmt.Errorf("%d bytes fewer than the %w", c.left, errSizeHashed)
		}
		err = nil // the probe above ends the object
	}
	return n, err
}

// errSizeHashed completes "n bytes fewer/more than the size hashed".
var errSizeHashed = fmt.Errorf("size hashed: %w", ErrChanged)

func (o *objectStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	info, err := o.Stat(ctx, name)
	if err != nil {
		return nil, err
	}
	timeout := o.slack + time.Duration(float64(info.Size)/float64(o.minRate)*float64(time.Second))
	gctx, cancel := context.WithTimeout(ctx, timeout)
	if o.js != nil {
		return o.pullGet(ctx, gctx, cancel, timeout, name)
	}
	res, err := o.os.Get(gctx, name)
	if err != nil {
		cancel()
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, fmt.Errorf("get %s: %w", name, ErrNotFound)
		}
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	// Check against what nats.go read at the start of this Get, not the Stat
	// above: the two agree unless the object was replaced in between.
	ni, err := res.Info()
	if err == nil {
		var want string
		if want, err = natsDigest(ni.Digest); err == nil {
			return newObjectReader(ctx, gctx, cancel, timeout, name, res, int64(ni.Size), want), nil
		}
		err = fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	cancel()
	res.Close()
	return nil, fmt.Errorf("get %s: %w", name, err)
}

// objectReader checks an object as it streams: never more bytes than were
// put, and at the end exactly their size and digest.
//
// nats.go's object reader does not return when its context is cancelled
// before the first chunk arrives: it unsubscribes, and the read waits for the
// deadline. So a goroutine pumps it into a pipe that cancellation can close
// at once; the pump itself ends at the deadline at the latest, since the
// subscription is gone by then.
type objectReader struct {
	name    string
	ctx     context.Context // the caller's
	gctx    context.Context // bounded by the transfer timeout
	cancel  context.CancelFunc
	stop    func() bool
	timeout time.Duration
	pr      *io.PipeReader
	size    int64
	n       int64
	want    string
	h       hash.Hash
}

func newObjectReader(ctx, gctx context.Context, cancel context.CancelFunc, timeout time.Duration, name string, res io.ReadCloser, size int64, want string) *objectReader {
	pr, pw := io.Pipe()
	go func() {
		defer cancel()
		defer res.Close()
		_, err := io.Copy(pw, res)
		pw.CloseWithError(err)
	}()
	return &objectReader{
		name: name, ctx: ctx, gctx: gctx, cancel: cancel, timeout: timeout,
		stop: context.AfterFunc(ctx, func() { pr.CloseWithError(ctx.Err()) }),
		pr:   pr, size: size, want: want, h: sha256.New(),
	}
}

func (r *objectReader) Read(p []byte) (int, error) {
	n, err := r.pr.Read(p)
	r.h.Write(p[:n])
	r.n += int64(n)
	if r.n > r.size {
		return 0, fmt.Errorf("get %s: more than the %d bytes stored: %w", r.name, r.size, ErrCorrupt)
	}
	switch {
	case err == nil:
		return n, nil
	case err == io.EOF:
		if got := hashDigest(r.h); r.n != r.size || got != r.want {
			return n, fmt.Errorf("get %s: read %d bytes %s, stored %d bytes %s: %w", r.name, r.n, got, r.size, r.want, ErrCorrupt)
		}
		return n, io.EOF
	case r.ctx.Err() != nil:
		return n, fmt.Errorf("get %s: %w", r.name, r.ctx.Err())
	case errors.Is(err, jetstream.ErrDigestMismatch):
		return n, fmt.Errorf("get %s: %w: %w", r.name, ErrCorrupt, err)
	case r.gctx.Err() != nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded):
		return n, fmt.Errorf("get %s: %d of %d bytes after %s: %w", r.name, r.n, r.size, r.timeout, ErrTimeout)
	default:
		return n, fmt.Errorf("get %s: %w", r.name, err)
	}
}

// Close ends the transfer. It does not wait for the pump: that may take
// until the deadline.
func (r *objectReader) Close() error {
	r.stop()
	r.pr.Close()
	r.cancel()
	return nil
}

// pullGet is Get with WithPullReads: the object's metadata read afresh,
// then its chunks with batched direct gets on their subject.
func (o *objectStore) pullGet(ctx, gctx context.Context, cancel context.CancelFunc, timeout time.Duration, name string) (io.ReadCloser, error) {
	ni, err := o.os.GetInfo(gctx, name)
	if err != nil {
		cancel()
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, fmt.Errorf("get %s: %w", name, ErrNotFound)
		}
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	want, err := natsDigest(ni.Digest)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("get %s: %w: %w", name, ErrCorrupt, err)
	}
	// e31 runs JetStream in no domain: its API is under the default prefix.
	cr := &chunkReader{ctx: gctx, nc: o.js.Conn(), api: jetstream.DefaultAPIPrefix + "DIRECT.GET.OBJ_" + ni.Bucket,
		subject: "$O." + ni.Bucket + ".C." + ni.NUID, done: ni.Chunks == 0}
	return newObjectReader(ctx, gctx, cancel, timeout, name, cr, int64(ni.Size), want), nil
}

// chunkReader reads an object's chunks in order, a batch of direct gets at
// a time, until the stream has none left on their subject (as nats.go's Get
// does, by the pending count): a chunk missing or added shows as a wrong
// size or digest.
type chunkReader struct {
	ctx     context.Context
	nc      *nats.Conn
	api     string // the direct get subject of the bucket's stream
	subject string // the object's chunks
	next    uint64 // the stream sequence to read from
	sub     *nats.Subscription
	buf     []byte
	done    bool
}

// numPendingHeader is how many messages on the subject follow a direct
// get's answer in a batch (nats-server's JSNumPending).
const numPendingHeader = "Nats-Num-Pending"

// chunkBatch is how many chunks one direct get asks for: 8 MiB of the
// default 128 KiB chunks.
const chunkBatch = 64

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.done {
			return 0, io.EOF
		}
		if err := r.ctx.Err(); err != nil {
			return 0, err
		}
		if r.sub == nil {
			if err := r.ask(); err != nil {
				return 0, err
			}
		}
		m, err := r.sub.NextMsgWithContext(r.ctx)
		if err != nil {
			return 0, err
		}
		switch status := m.Header.Get("Status"); {
		case status == "204": // the end of this batch
			_ = r.sub.Unsubscribe()
			r.sub = nil
			if m.Header.Get(numPendingHeader) == "0" {
				r.done = true
			}
			continue
		case status == "404": // no chunk at or after r.next
			r.done = true
			continue
		case status != "":
			return 0, fmt.Errorf("chunks: direct get answered %s %s", status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("chunks: direct get without a sequence: %w", err)
		}
		r.next, r.buf = seq+1, m.Data
		if m.Header.Get(numPendingHeader) == "0" {
			// The last chunk; the end of the batch follows, unread.
			r.done = true
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// ask requests the next batch of chunks, answered on an inbox of its own.
func (r *chunkReader) ask() error {
	inbox := r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("chunks: %w", err)
	}
	req, err := json.Marshal(struct {
		Seq      uint64 `json:"seq"`
		NextFor  string `json:"next_by_subj"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes"`
	}{r.next, r.subject, chunkBatch, chunkBatch << 17})
	if err == nil {
		err = r.nc.PublishRequest(r.api, inbox, req)
	}
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("chunks: %w", err)
	}
	r.sub = sub
	return nil
}

// Close ends the batch being read.
func (r *chunkReader) Close() error {
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
	return nil
}

func (o *objectStore) Stat(ctx context.Context, name string) (Info, error) {
	info, err := o.os.GetInfo(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return Info{}, fmt.Errorf("stat %s: %w", name, ErrNotFound)
		}
		return Info{}, fmt.Errorf("stat %s: %w", name, err)
	}
	d, err := natsDigest(info.Digest)
	if err != nil {
		return Info{}, fmt.Errorf("stat %s: %w: %w", name, ErrCorrupt, err)
	}
	return Info{Size: int64(info.Size), Digest: d}, nil
}

func (o *objectStore) Delete(ctx context.Context, name string) error {
	if err := o.os.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// natsDigest turns nats.go's "SHA-256=<base64url>" into "sha256:<hex>".
func natsDigest(d string) (string, error) {
	const prefix = "SHA-256="
	if len(d) <= len(prefix) || d[:len(prefix)] != prefix {
		return "", fmt.Errorf("digest %q is not SHA-256", d)
	}
	b, err := base64.URLEncoding.DecodeString(d[len(prefix):])
	if err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("digest %q is not SHA-256", d)
	}
	return digestPrefix + hex.EncodeToString(b), nil
}
