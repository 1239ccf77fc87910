package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/e31net/e31/pkg/events"
	"github.com/e31net/e31/pkg/stage"
)

// Client is a run node's side of the gate. It is safe for concurrent use.
type Client struct {
	nc   *nats.Conn
	node string
	// wait bounds how long one answer may take: a request, a piece of an
	// object. A request that went to a gate instance that then died is
	// never answered.
	wait time.Duration
}

// NewClient returns the gate's client for node, asking on nc (connected
// as that node: only it may ask as it).
func NewClient(nc *nats.Conn, node string) *Client {
	return &Client{nc: nc, node: node, wait: 30 * time.Second}
}

// MakeConsumer asks the gate to make the durable consumer cc on stream,
// one of NodeConsumers: what a node may not do itself. It has the
// signature of bus.SubscriberConfig.Make.
func (c *Client) MakeConsumer(ctx context.Context, stream string, cc jetstream.ConsumerConfig) error {
	if stream != events.Stream {
		return fmt.Errorf("%w: consumers on %s only", ErrRefused, events.Stream)
	}
	body, err := json.Marshal(cc)
	if err != nil {
		return err
	}
	if _, err := c.request(ctx, subjectOf(c.node, OpConsumer), body, nil); err != nil {
		return fmt.Errorf("make consumer %s: %w", cc.Durable, err)
	}
	return nil
}

// request asks once and returns the answer, or the error it says.
func (c *Client) request(ctx context.Context, subject string, body []byte, h nats.Header) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, c.wait)
	defer cancel()
	m := nats.NewMsg(subject)
	m.Data = body
	for k, v := range h {
		m.Header[k] = v
	}
	r, err := c.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("gate: %w", err)
	}
	if err := errorOf(r); err != nil {
		return nil, err
	}
	return r, nil
}

// Store is the store of attempt of job, as the gate lets this node use it:
// its inputs read, its output and logs written, while it is held here.
// Delete is refused: a node deletes nothing.
func (c *Client) Store(job string, attempt int) stage.Store {
	return &store{c: c, job: job, attempt: attempt}
}

type store struct {
	c       *Client
	job     string
	attempt int
}

// header is the request about name, in headers.
func (s *store) header(q Request) nats.Header {
	h := nats.Header{}
	q.Job, q.Attempt = s.job, s.attempt
	q.header(h)
	return h
}

// Stat implements stage.Store.
func (s *store) Stat(ctx context.Context, name string) (stage.Info, error) {
	r, err := s.c.request(ctx, subjectOf(s.c.node, OpStat), nil, s.header(Request{Name: name}))
	if err != nil {
		return stage.Info{}, fmt.Errorf("stat %s: %w", name, err)
	}
	var info Info
	if err := json.Unmarshal(r.Data, &info); err != nil {
		return stage.Info{}, fmt.Errorf("stat %s: %w", name, err)
	}
	return stage.Info{Size: info.Size, Digest: info.Digest}, nil
}

// Delete implements stage.Store: refused.
func (s *store) Delete(_ context.Context, name string) error {
	return fmt.Errorf("%w: a node deletes nothing (%s)", ErrRefused, name)
}

// Get implements stage.Store: one request, the object streamed back in
// pieces. The first piece, or the error, is waited for before it returns,
// so that a missing object fails here with stage.ErrNotFound.
func (s *store) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	// The pieces of an object (at most a part of a file, 16 MiB) may all
	// come before the first is read, and must not be dropped: they wait in
	// the subscription's own list, as long as it takes, handed over one
	// at a time.
	in := make(chan *nats.Msg)
	gone := make(chan struct{})
	sub, err := s.c.nc.Subscribe(s.c.nc.NewInbox(), func(m *nats.Msg) {
		select {
		case in <- m:
		case <-gone:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("get %s: gate: %w", name, err)
	}
	r := &reader{ctx: ctx, sub: sub, in: in, gone: gone, wait: s.c.wait, name: name}
	if err := sub.SetPendingLimits(-1, 256<<20); err != nil {
		r.Close()
		return nil, fmt.Errorf("get %s: gate: %w", name, err)
	}
	m := nats.NewMsg(subjectOf(s.c.node, OpGet))
	m.Reply, m.Header = sub.Subject, s.header(Request{Name: name})
	if err := s.c.nc.PublishMsg(m); err != nil {
		r.Close()
		return nil, fmt.Errorf("get %s: gate: %w", name, err)
	}
	if err := r.next(); err != nil {
		r.Close()
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	return r, nil
}

// reader reads the pieces of one object as they come.
type reader struct {
	ctx  context.Context
	sub  *nats.Subscription
	in   chan *nats.Msg
	gone chan struct{} // closed by Close
	wait time.Duration
	name string
	buf  []byte
	part int  // the piece expected next
	done bool // the end came
	err  error
}

// next takes the next message: a piece into buf, or the end.
func (r *reader) next() error {
	if r.err != nil || r.done {
		return r.err
	}
	t := time.NewTimer(r.wait)
	defer t.Stop()
	var m *nats.Msg
	select {
	case m = <-r.in:
	case <-t.C:
		r.err = fmt.Errorf("gate: piece %d of %s did not come in %s: %w", r.part, r.name, r.wait, stage.ErrTimeout)
		return r.err
	case <-r.ctx.Done():
		r.err = r.ctx.Err()
		return r.err
	}
	if err := errorOf(m); err != nil {
		r.err = err
		return err
	}
	if end := m.Header.Get(HeaderEnd); end != "" {
		if n, err := strconv.Atoi(end); err != nil || n != r.part {
			r.err = fmt.Errorf("gate: %s ended after %s pieces, %d came: %w", r.name, end, r.part, stage.ErrCorrupt)
			return r.err
		}
		r.done = true
		return nil
	}
	if got := m.Header.Get(HeaderPart); got != strconv.Itoa(r.part) {
		r.err = fmt.Errorf("gate: piece %q of %s came where %d was due: %w", got, r.name, r.part, stage.ErrCorrupt)
		return r.err
	}
	r.part++
	r.buf = m.Data
	return nil
}

// Read implements io.Reader.
func (r *reader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.done {
			return 0, io.EOF
		}
		if err := r.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close implements io.Closer.
func (r *reader) Close() error {
	if r.gone != nil {
		close(r.gone)
		r.gone = nil
	}
	_ = r.sub.Unsubscribe()
	return nil
}

// Put implements stage.Store: the object's first piece goes with the
// request, and if it is all of it (a small object, most of them) the
// answer is the outcome of storing it. Otherwise the gate opens a session,
// and the rest goes to it piece by piece, each answered once written; the
// last answer is the outcome of storing the whole.
func (s *store) Put(ctx context.Context, name, digest string, size int64, r io.Reader) error {
	buf := make([]byte, ChunkBytes)
	n, rerr := io.ReadFull(r, buf)
	last := errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)
	if rerr != nil && !last {
		return fmt.Errorf("put %s: %w", name, rerr)
	}
	h := s.header(Request{Name: name, Digest: digest, Size: size})
	h.Set(HeaderPart, "0")
	if last {
		h.Set(HeaderEnd, "1")
	}
	reply, err := s.c.request(ctx, subjectOf(s.c.node, OpPut), buf[:n], h)
	if err != nil || last {
		if err != nil {
			return fmt.Errorf("put %s: %w", name, err)
		}
		return nil
	}
	var ses Session
	if err := json.Unmarshal(reply.Data, &ses); err != nil || !events.ValidID(ses.ID) {
		return fmt.Errorf("put %s: gate: no session in %q", name, reply.Data)
	}
	subject := events.GateChunkSubject(s.c.node, ses.ID)
	for part := 1; ; part++ {
		n, rerr := io.ReadFull(r, buf)
		last := errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)
		if rerr != nil && !last {
			// The session ends unfinished: the gate stores nothing.
			s.abort(subject, rerr)
			return fmt.Errorf("put %s: %w", name, rerr)
		}
		h := nats.Header{}
		h.Set(HeaderPart, strconv.Itoa(part))
		if last {
			h.Set(HeaderEnd, strconv.Itoa(part+1))
		}
		if _, err := s.c.request(ctx, subject, buf[:n], h); err != nil {
			if !last {
				s.abort(subject, err)
			}
			return fmt.Errorf("put %s: %w", name, err)
		}
		if last {
			return nil
		}
	}
}

// abort tells a session that the object will not come whole.
func (s *store) abort(subject string, why error) {
	m := nats.NewMsg(subject)
	m.Header.Set(HeaderError, CodeFailed)
	m.Data = []byte(why.Error())
	_ = s.c.nc.PublishMsg(m)
}
